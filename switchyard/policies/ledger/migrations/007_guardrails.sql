-- The guardrails that acted on a request ("<name>:<action>,...", as x-switchyard-guardrails
-- names them; never what they matched). Grouped by guard from the records themselves
-- (group_by=guardrail): only requests a guard acted on carry one.
ALTER TABLE usage_records ADD COLUMN guardrails text NOT NULL DEFAULT '';
CREATE INDEX usage_records_guarded ON usage_records (ts) WHERE guardrails <> '';

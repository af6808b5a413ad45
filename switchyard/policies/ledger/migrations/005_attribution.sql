-- Who a request was for besides its key (policies/attribution.py): its tags (a comma list), end
-- user and session. Grouped and filtered from usage_records (the rollups keep no such dimension).
ALTER TABLE usage_records ADD COLUMN tags text NOT NULL DEFAULT '';
ALTER TABLE usage_records ADD COLUMN end_user text NOT NULL DEFAULT '';
ALTER TABLE usage_records ADD COLUMN session text NOT NULL DEFAULT '';
CREATE INDEX usage_records_end_user ON usage_records (end_user, ts) WHERE end_user <> '';
CREATE INDEX usage_records_session ON usage_records (session, ts) WHERE session <> '';

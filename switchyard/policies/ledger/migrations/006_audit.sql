-- The audit trail of admin changes (switchyard.policies.audit), append-only: a trigger refuses
-- every UPDATE and TRUNCATE, and every DELETE except the retention purge (which sets
-- switchyard.audit_purge for its own transaction).
CREATE TABLE audit_log (
    id         bigserial PRIMARY KEY,
    at         timestamptz NOT NULL,
    actor      text NOT NULL,
    email      text,
    role       text,
    action     text NOT NULL,
    target     text NOT NULL,
    before     jsonb,
    after      jsonb,
    client     text,
    request_id text,
    teams      text[]
);
CREATE INDEX audit_log_at ON audit_log (at);

CREATE FUNCTION audit_log_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND current_setting('switchyard.audit_purge', true) = 'on' THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'audit_log is append-only (% refused)', TG_OP;
END
$$;
CREATE TRIGGER audit_log_no_change BEFORE UPDATE OR DELETE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION audit_log_append_only();
CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION audit_log_append_only();

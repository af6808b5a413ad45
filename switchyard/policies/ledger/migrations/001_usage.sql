-- One row per request that reached admission. Never the key, never the prompt.
-- ticket_id is unique per admission: inserts are idempotent on it (ON CONFLICT DO NOTHING).
CREATE TABLE usage_records (
    ticket_id          text PRIMARY KEY,
    ts                 timestamptz NOT NULL,  -- admission, by the store's clock
    request_id         text NOT NULL,
    key_id             text NOT NULL,
    team               text NOT NULL,
    model              text NOT NULL,         -- the group that admitted it
    requested_model    text NOT NULL,         -- what the caller named
    deployment         text NOT NULL,         -- the one that served ('' = none)
    endpoint           text NOT NULL,
    dialect            text NOT NULL,
    status             smallint NOT NULL,
    prompt_tokens      bigint NOT NULL,
    completion_tokens  bigint NOT NULL,
    cached_tokens      bigint NOT NULL,
    cost_nano          bigint NOT NULL,       -- exact, integer nano-USD
    latency_ms         double precision NOT NULL,
    ttfb_ms            double precision NOT NULL,  -- -1: no byte was sent
    attempts           smallint NOT NULL,
    cut                boolean NOT NULL
);

-- Raw rows are read newest first, a page at a time (keyset on (ts, ticket_id)), overall or for
-- one team or key. Aggregates never scan this table: they read usage_hourly.
CREATE INDEX usage_records_ts ON usage_records (ts DESC, ticket_id DESC);
CREATE INDEX usage_records_team_ts ON usage_records (team, ts DESC, ticket_id DESC);
CREATE INDEX usage_records_key_ts ON usage_records (key_id, ts DESC, ticket_id DESC);

-- The hourly rollup, maintained in the same statement as the insert (only rows really inserted
-- count), so day/hour/model/key/team/status aggregates read thousands of rows, not millions.
CREATE TABLE usage_hourly (
    hour               timestamptz NOT NULL,
    team               text NOT NULL,
    key_id             text NOT NULL,
    model              text NOT NULL,
    deployment         text NOT NULL,
    status             smallint NOT NULL,
    requests           bigint NOT NULL,
    errors             bigint NOT NULL,
    prompt_tokens      bigint NOT NULL,
    completion_tokens  bigint NOT NULL,
    cached_tokens      bigint NOT NULL,
    cost_nano          bigint NOT NULL,
    latency_ms         double precision NOT NULL,  -- a sum: divide by requests
    PRIMARY KEY (hour, team, key_id, model, deployment, status)
);
CREATE INDEX usage_hourly_team_hour ON usage_hourly (team, hour);

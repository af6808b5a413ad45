-- Refused requests are recorded too (status 4xx, no model called): each row says why
-- (``reason``: model_not_allowed, rate_limit:rpm, quota:spend_day, bad_request:<param>, ...), and
-- the rollups count them (``refused``) and keep the reason as a dimension.
ALTER TABLE usage_records ADD COLUMN reason text NOT NULL DEFAULT '';

ALTER TABLE usage_hourly ADD COLUMN reason text NOT NULL DEFAULT '';
ALTER TABLE usage_hourly ADD COLUMN refused bigint NOT NULL DEFAULT 0;
ALTER TABLE usage_hourly DROP CONSTRAINT usage_hourly_pkey;
ALTER TABLE usage_hourly ADD PRIMARY KEY (hour, team, key_id, model, deployment, status, reason);
UPDATE usage_hourly SET refused = requests WHERE status BETWEEN 400 AND 499 AND deployment = '';

-- The last hours by minute (the console's "last hour"): the same sums per minute, without the
-- deployment; rows older than two days are deleted as new batches come (sink.py).
CREATE TABLE usage_minute (
    minute             timestamptz NOT NULL,
    team               text NOT NULL,
    key_id             text NOT NULL,
    model              text NOT NULL,
    status             smallint NOT NULL,
    reason             text NOT NULL,
    requests           bigint NOT NULL,
    errors             bigint NOT NULL,
    refused            bigint NOT NULL,
    prompt_tokens      bigint NOT NULL,
    completion_tokens  bigint NOT NULL,
    cached_tokens      bigint NOT NULL,
    cost_nano          bigint NOT NULL,
    latency_ms         double precision NOT NULL,
    cache_write_tokens bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (minute, team, key_id, model, status, reason)
);

-- Answers served by the response cache (docs/cache.md): no upstream was called and no tokens were
-- charged; each row says what the original answer's tokens and price were (what the hit saved),
-- and the rollups count the hits and sum the savings.
ALTER TABLE usage_records ADD COLUMN cache_hit boolean NOT NULL DEFAULT false;
ALTER TABLE usage_records ADD COLUMN saved_tokens bigint NOT NULL DEFAULT 0;
ALTER TABLE usage_records ADD COLUMN saved_nano bigint NOT NULL DEFAULT 0;

ALTER TABLE usage_hourly ADD COLUMN cache_hits bigint NOT NULL DEFAULT 0;
ALTER TABLE usage_hourly ADD COLUMN saved_tokens bigint NOT NULL DEFAULT 0;
ALTER TABLE usage_hourly ADD COLUMN saved_nano bigint NOT NULL DEFAULT 0;

ALTER TABLE usage_minute ADD COLUMN cache_hits bigint NOT NULL DEFAULT 0;
ALTER TABLE usage_minute ADD COLUMN saved_tokens bigint NOT NULL DEFAULT 0;
ALTER TABLE usage_minute ADD COLUMN saved_nano bigint NOT NULL DEFAULT 0;

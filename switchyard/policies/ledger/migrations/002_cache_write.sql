-- Prompt tokens written to an upstream's prompt cache (Anthropic's cache_creation_input_tokens),
-- counted inside prompt_tokens as cached_tokens are; priced apart (price.cache_write_per_1m).
ALTER TABLE usage_records ADD COLUMN cache_write_tokens bigint NOT NULL DEFAULT 0;
ALTER TABLE usage_hourly ADD COLUMN cache_write_tokens bigint NOT NULL DEFAULT 0;

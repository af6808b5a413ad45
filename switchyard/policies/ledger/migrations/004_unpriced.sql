-- Requests served by a deployment without a known price (no models[].price, not in the
-- genai-prices catalog): cost_nano is 0 for them, and they are counted apart, never a silent $0.
ALTER TABLE usage_records ADD COLUMN unpriced boolean NOT NULL DEFAULT false;
ALTER TABLE usage_hourly ADD COLUMN unpriced bigint NOT NULL DEFAULT 0;
ALTER TABLE usage_minute ADD COLUMN unpriced bigint NOT NULL DEFAULT 0;

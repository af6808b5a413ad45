-- Admit one request against every limit of every scope, all or nothing.
-- KEYS: 2 per scope (all one hash tag): counters HASH (rq, tk: request / token GCRA theoretical
--       arrival ms; d td sd, m tm sm: quota day, tokens, spend, month, ...), lease ZSET; then the
--       team's reservations (ZSET: mark -> expiry ms, renewed while the request runs; HASH: mark
--       -> what it reserved, for reap.lua), then the ticket's mark (STRING): the admission time
--       while the request runs, 'x' once cancelled, 's' once settled, 'r:..' once reaped.
-- ARGV: tokens, spend (nano-USD), lease id ('' = none), lease ttl ms, clock skew ms (tests),
--       then 7 limits per scope (-1 = none): rpm tpm concurrency tokens/day tokens/month
--       spend/day spend/month; tokens/day -2 (plan.LIFETIME): the month quotas count for the
--       scope's lifetime (a session's), its month kept at 0.
-- Returns {1, now, req_limit, req_remaining, req_reset, tok_limit, tok_remaining, tok_reset}
--      or {0, now, scope (1-based), kind, retry_ms, limit, remaining}: remaining is what the
--      refusing quota has left (the gateway may shrink max_tokens to it), -1 for other kinds.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[5])
local tokens, spend = tonumber(ARGV[1]), tonumber(ARGV[2])
local lease, ttl = ARGV[3], tonumber(ARGV[4])
local WINDOW, DAY = 60000, 86400000
local day = math.floor(now / DAY)
local mark = KEYS[#KEYS]
local at = redis.call('GET', mark)
-- A cancelled (or settled) ticket: its caller timed out and gave up on this call, which arrives late.
if at == 'x' or at == 's' or string.sub(at or '', 1, 2) == 'r:' then return {0, now, 0, 'cancelled', 0, 0} end
-- Admitted already: this is the same call sent again (its reply was lost to a dropped
-- connection). Admitted, reserving nothing twice.
if at then return {1, tonumber(at), -1, -1, 0, -1, -1, 0} end

local month = month_of(day)
local req_l, req_r, req_t = -1, -1, 0
local tok_l, tok_r, tok_t = -1, -1, 0
local writes = {}
local nscopes = (#KEYS - 3) / 2
local held = {}  -- the counters whose quotas this admission charges (reap.lua gives them back)

for i = 1, nscopes do
  local c, z, a = KEYS[2 * i - 1], KEYS[2 * i], 5 + (i - 1) * 7
  local rpm, tpm, conc = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
  local tpd, tpmo = tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5])
  local spd, spmo = tonumber(ARGV[a + 6]), tonumber(ARGV[a + 7])
  local quota = tpd >= 0 or tpmo >= 0 or spd >= 0 or spmo >= 0
  local h = redis.call('HMGET', c, 'rq', 'tk', 'd', 'td', 'sd', 'm', 'tm', 'sm')
  local set = {}
  if rpm >= 0 then
    local per = WINDOW / rpm
    local tat = tonumber(h[1]) or now
    if tat < now then tat = now end
    local new = tat + per
    if new - now > WINDOW then return {0, now, i, 'rpm', math.ceil(new - now - WINDOW), rpm} end
    local rem = math.floor((WINDOW - (new - now)) / per + 1e-9)
    if req_r < 0 or rem < req_r then req_l, req_r, req_t = rpm, rem, math.ceil(new - now) end
    set[#set + 1] = 'rq'; set[#set + 1] = string.format('%.3f', new)
  end
  if tpm >= 0 then
    if tokens > tpm then return {0, now, i, 'too_large', WINDOW, tpm} end
    local per = WINDOW / tpm
    local tat = tonumber(h[2]) or now
    if tat < now then tat = now end
    local new = tat + tokens * per
    if new - now > WINDOW then return {0, now, i, 'tpm', math.ceil(new - now - WINDOW), tpm} end
    local rem = math.floor((WINDOW - (new - now)) / per + 1e-9)
    if tok_r < 0 or rem < tok_r then tok_l, tok_r, tok_t = tpm, rem, math.ceil(new - now) end
    set[#set + 1] = 'tk'; set[#set + 1] = string.format('%.3f', new)
  end
  if conc >= 0 and lease ~= '' then
    redis.call('ZREMRANGEBYSCORE', z, '-inf', now)
    if redis.call('ZCARD', z) >= conc then return {0, now, i, 'concurrency', 1000, conc} end
    writes[#writes + 1] = z
  end
  if quota then
    local life = tpd == -2
    local mon = life and 0 or month
    local sameday, samemonth = tonumber(h[3]) == day, tonumber(h[6]) == mon
    local td = sameday and tonumber(h[4] or 0) or 0
    local sd = sameday and tonumber(h[5] or 0) or 0
    local tm = samemonth and tonumber(h[7] or 0) or 0
    local sm = samemonth and tonumber(h[8] or 0) or 0
    local eod, eom = (day + 1) * DAY - now, life and -1 or next_month_ms(month) - now
    if tpd >= 0 and td + tokens > tpd then return {0, now, i, 'tokens_per_day', eod, tpd, tpd - td} end
    if tpmo >= 0 and tm + tokens > tpmo then return {0, now, i, 'tokens_per_month', eom, tpmo, tpmo - tm} end
    if spd >= 0 and sd + spend > spd then return {0, now, i, 'spend_per_day', eod, spd, spd - sd} end
    if spmo >= 0 and sm + spend > spmo then return {0, now, i, 'spend_per_month', eom, spmo, spmo - sm} end
    local n = #set
    set[n + 1], set[n + 2] = 'd', day
    set[n + 3], set[n + 4] = 'td', string.format('%d', td + tokens)
    set[n + 5], set[n + 6] = 'sd', string.format('%d', sd + spend)
    set[n + 7], set[n + 8] = 'm', mon
    set[n + 9], set[n + 10] = 'tm', string.format('%d', tm + tokens)
    set[n + 11], set[n + 12] = 'sm', string.format('%d', sm + spend)
  end
  if #set > 0 then
    -- GCRA fields never run more than a window ahead here; quotas live for their month.
    writes[#writes + 1] = {c, set, quota and 35 * DAY or WINDOW + 1000}
    if quota then held[#held + 1] = c end
  end
end

for _, w in ipairs(writes) do
  if type(w) == 'string' then
    redis.call('ZADD', w, now + ttl, lease)
    redis.call('PEXPIRE', w, ttl * 2)
  else
    redis.call('HSET', w[1], unpack(w[2]))
    redis.call('PEXPIRE', w[1], w[3])
  end
end
-- Until settled (which deletes it): lets a caller that timed out cancel this admission exactly.
redis.call('SET', mark, now, 'PX', 30000)
-- A quota reservation is held until settled; if its replica dies first, it expires and is reaped.
if #held > 0 and (tokens > 0 or spend > 0) then
  local resv, resvd = KEYS[#KEYS - 2], KEYS[#KEYS - 1]
  redis.call('ZADD', resv, now + ttl, mark)
  redis.call('HSET', resvd, mark, now .. ' ' .. tokens .. ' ' .. spend .. ' ' .. table.concat(held, ' '))
  redis.call('PEXPIRE', resv, 35 * DAY)
  redis.call('PEXPIRE', resvd, 35 * DAY)
end
return {1, now, req_l, req_r, req_t, tok_l, tok_r, tok_t}

-- Settle one request: move its reservation to the real usage, free its lease, record it.
-- KEYS: 2 per scope (as admit.lua), then the team's day aggregate HASH, its minute aggregate HASH
--       (of the admission's hour), its record STREAM, its reservations ZSET and HASH, and the
--       ticket's mark (see admit.lua).
-- ARGV: token delta, spend delta (nano-USD), lease id ('' = none), admitted ms (dates the
--       quota periods), rates (0 = quotas only, 1 = also move the tpm bucket, 2 = that and give
--       the request back to the rpm limits: no model was called; c = cancel an admission whose
--       caller timed out, if it happened: deltas undo the reservation, nothing is recorded),
--       max records, clock skew ms (tests), 7 limits per scope, then two msgpack arrays (cmsgpack):
--       the aggregates' (field, increment, ...) and the record's (field, value, ...).
-- A settled ticket's mark reads 's' for 30 s: a settlement the gateway gave up waiting for (a
-- Redis stall) still runs when Redis wakes, and its replay, a moment later, must change nothing.
local td, sd = tonumber(ARGV[1]), tonumber(ARGV[2])
local lease, admitted, mode = ARGV[3], tonumber(ARGV[4]), ARGV[5]
local rates, refund, cancel = mode ~= '0', mode == '2' or mode == 'c', mode == 'c'
local maxrec, skew = tonumber(ARGV[6]), tonumber(ARGV[7])
local WINDOW, DAY = 60000, 86400000
local nscopes = (#KEYS - 6) / 2
local mark = KEYS[#KEYS]
local resv, resvd = KEYS[#KEYS - 2], KEYS[#KEYS - 1]
local at = redis.call('GET', mark)
if at == 's' then return 0 end  -- settled already: this is a replay
-- The quotas' share of the deltas; a reaped ticket (its replica was thought dead) had its
-- reservation given back already, so its settlement charges the whole usage.
local qtd, qsd = td, sd
local reaped = string.sub(at or '', 1, 2) == 'r:'
if reaped then
  local rt, rs = string.match(at, '^r:(%-?%d+):(%-?%d+)')
  qtd, qsd = td + tonumber(rt), sd + tonumber(rs)
end
redis.call('ZREM', resv, mark)
redis.call('HDEL', resvd, mark)
if cancel then
  redis.call('SET', mark, 'x', 'PX', 30000)  -- an admission still on its way will be refused
  if not at or at == 'x' or reaped then return 0 end  -- it never happened, was cancelled or reaped
  admitted = tonumber(at)
end
local day = math.floor(admitted / DAY)

local month = month_of(day)
local now = nil

for i = 1, nscopes do
  local c, z, a = KEYS[2 * i - 1], KEYS[2 * i], 7 + (i - 1) * 7
  local rpm, tpm, conc = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
  local quotas = tonumber(ARGV[a + 4]) >= 0 or tonumber(ARGV[a + 5]) >= 0
      or tonumber(ARGV[a + 6]) >= 0 or tonumber(ARGV[a + 7]) >= 0
  local bucket = rates and tpm >= 0 and td ~= 0
  local quota = quotas and (qtd ~= 0 or qsd ~= 0)
  local unreq = refund and rpm >= 0
  if bucket or quota or unreq then
    local h = redis.call('HMGET', c, 'tk', 'd', 'td', 'sd', 'm', 'tm', 'sm', 'rq')
    local set = {}
    local px = WINDOW + 1000
    if unreq and h[8] then
      set[1], set[2] = 'rq', string.format('%.3f', tonumber(h[8]) - WINDOW / rpm)
    end
    if bucket then
      if not now then
        local t = redis.call('TIME')
        now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + skew
      end
      local per = WINDOW / tpm
      local cur = tonumber(h[1])
      local tat = nil
      if td > 0 then  -- a charge: the bucket may be full (no value) or in debt
        tat = math.max(cur or now, now) + td * per
      elseif cur then  -- a refund, down to a full bucket
        tat = cur + td * per
      end
      local n = #set
      if tat and tat > now then
        set[n + 1], set[n + 2] = 'tk', string.format('%.3f', tat)
        px = math.max(px, math.ceil(tat - now) + 1000)
      elseif cur then
        set[n + 1], set[n + 2] = 'tk', '0'  -- a full bucket, as no value
      end
    end
    if quota then
      -- The admission's period only: a newer one already reset, an older one is gone.
      local d, m = tonumber(h[2]), tonumber(h[5])
      local n = #set
      if not d or d < day then
        set[n + 1], set[n + 2], set[n + 3], set[n + 4] = 'd', day, 'td', string.format('%d', qtd)
        set[n + 5], set[n + 6] = 'sd', string.format('%d', qsd)
      elseif d == day then
        set[n + 1], set[n + 2] = 'td', string.format('%d', tonumber(h[3] or 0) + qtd)
        set[n + 3], set[n + 4] = 'sd', string.format('%d', tonumber(h[4] or 0) + qsd)
      end
      n = #set
      local mon = tonumber(ARGV[a + 4]) == -2 and 0 or month  -- a lifetime scope's (admit.lua)
      if not m or m < mon then
        set[n + 1], set[n + 2], set[n + 3], set[n + 4] = 'm', mon, 'tm', string.format('%d', qtd)
        set[n + 5], set[n + 6] = 'sm', string.format('%d', qsd)
      elseif m == mon then
        set[n + 1], set[n + 2] = 'tm', string.format('%d', tonumber(h[6] or 0) + qtd)
        set[n + 3], set[n + 4] = 'sm', string.format('%d', tonumber(h[7] or 0) + qsd)
      end
    end
    if quotas then px = 35 * DAY end
    if #set > 0 then
      redis.call('HSET', c, unpack(set))
      -- A refunded request alone leaves the hash's expiry as admission set it.
      if bucket or quota then redis.call('PEXPIRE', c, px) end
    end
  end
  if conc >= 0 and lease ~= '' then
    redis.call('ZREM', z, lease)
  end
end

if cancel then return 1 end
redis.call('SET', mark, 's', 'PX', 30000)  -- settled: nothing left to cancel or replay
local p = 8 + nscopes * 7
-- The day's aggregate, the admission's minute's (its hour's hash), the record stream (keep.lua).
keep(KEYS[#KEYS - 5], KEYS[#KEYS - 4], KEYS[#KEYS - 3], maxrec, tostring(math.floor(admitted / 60000)),
     cmsgpack.unpack(ARGV[p]), cmsgpack.unpack(ARGV[p + 1]))
return 1

-- Give back the quota reservations of admissions whose replica died before settling them: their
-- entry in the team's reservations ZSET was not renewed in time (a live replica renews it every
-- third of its ttl, see renew.lua). KEYS: the team's reservations ZSET and HASH (admit.lua).
-- ARGV: clock skew ms (tests), the most to reap in one call.
-- Each reaped ticket's mark becomes 'r:<tokens>:<spend>' for two days: if its request was alive
-- after all (a replica cut off from Redis for longer than the ttl), its settlement still comes
-- and charges its whole usage (settle.lua), so nothing is counted twice or lost.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[1])
local DAY = 86400000
local resv, resvd = KEYS[1], KEYS[2]
local due = redis.call('ZRANGEBYSCORE', resv, '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
local reaped = 0
for _, mark in ipairs(due) do
  local info = redis.call('HGET', resvd, mark)
  local at = redis.call('GET', mark)
  if info and at ~= 's' and at ~= 'x' and string.sub(at or '', 1, 2) ~= 'r:' then
    local parts = {}
    for w in string.gmatch(info, '%S+') do parts[#parts + 1] = w end
    local admitted, tokens, spend = tonumber(parts[1]), tonumber(parts[2]), tonumber(parts[3])
    local day = math.floor(admitted / DAY)
    local month = month_of(day)
    for i = 4, #parts do
      local h = redis.call('HMGET', parts[i], 'd', 'td', 'sd', 'm', 'tm', 'sm')
      local set = {}
      if tonumber(h[1]) == day then
        set[#set + 1], set[#set + 2] = 'td', string.format('%d', tonumber(h[2] or 0) - tokens)
        set[#set + 1], set[#set + 2] = 'sd', string.format('%d', tonumber(h[3] or 0) - spend)
      end
      if tonumber(h[4]) == month or tonumber(h[4]) == 0 then  -- 0: a lifetime scope (admit.lua)
        set[#set + 1], set[#set + 2] = 'tm', string.format('%d', tonumber(h[5] or 0) - tokens)
        set[#set + 1], set[#set + 2] = 'sm', string.format('%d', tonumber(h[6] or 0) - spend)
      end
      if #set > 0 then redis.call('HSET', parts[i], unpack(set)) end
    end
    redis.call('SET', mark, 'r:' .. string.format('%d', tokens) .. ':' .. string.format('%d', spend),
               'PX', 2 * DAY)
    reaped = reaped + 1
  end
  redis.call('ZREM', resv, mark)
  redis.call('HDEL', resvd, mark)
end
return reaped

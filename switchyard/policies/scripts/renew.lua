-- Push live leases' and quota reservations' expiry ttl ms past now (Redis TIME). KEYS[i] is the
-- lease (or reservations) ZSET of ARGV[i + 1]. ZADD XX: one already released or reaped stays gone.
local t = redis.call('TIME')
local exp = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[1])
for i = 1, #KEYS do
  local changed = redis.call('ZADD', KEYS[i], 'XX', 'CH', exp, ARGV[i + 1]) == 1
  if changed and string.sub(KEYS[i], -3) == ':cc' then
    redis.call('PEXPIRE', KEYS[i], tonumber(ARGV[1]) * 2)  -- a lease set outlives its leases
  end
end
return #KEYS

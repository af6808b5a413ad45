-- Push live leases' expiry ttl ms past now (Redis TIME). KEYS[i] is the lease ZSET of ARGV[i + 1].
-- ZADD XX: a lease already released or expired stays gone.
local t = redis.call('TIME')
local exp = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[1])
for i = 1, #KEYS do
  redis.call('ZADD', KEYS[i], 'XX', exp, ARGV[i + 1])
end
return #KEYS

-- Calendar arithmetic shared by admit.lua, settle.lua and reap.lua (prepended to every script
-- when loaded): quota months are civil months of the UTC day number.
local function month_of(d)  -- civil-from-days: year * 12 + month - 1
  local z = d + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524) - math.floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local m = (mp < 10) and (mp + 3) or (mp - 9)
  local y = yoe + era * 400 + ((m <= 2) and 1 or 0)
  return y * 12 + m - 1
end

local function next_month_ms(mi)  -- days-from-civil of the 1st of the month after mi
  local y, m = math.floor((mi + 1) / 12), (mi + 1) % 12 + 1
  if m <= 2 then y = y - 1 end
  local era = math.floor(y / 400)
  local yoe = y - era * 400
  local mp = (m > 2) and (m - 3) or (m + 9)
  local doe = yoe * 365 + math.floor(yoe / 4) - math.floor(yoe / 100) + math.floor((153 * mp + 2) / 5)
  return (era * 146097 + doe - 719468) * 86400000
end

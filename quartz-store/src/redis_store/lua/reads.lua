-- ---- reads ----

-- The poll's order made again from `due` when the two differ in size, or
-- in how many are due before `before`: an index written before this order
-- existed, or beside a node of an older build, which keeps `due` alone (an
-- execute it inserted, deleted, or moved into or out of the window, as a
-- claim given back at its shutdown does). A member it moved within the
-- window is mended where a page meets it.
local function order_checked(before)
  local window = '(' .. before
  if redis.call('ZCARD', k('due')) == redis.call('ZCARD', k('due-order'))
    and redis.call('ZCOUNT', k('due'), '-inf', window) == redis.call('ZCOUNT', k('due-order'), '-inf', window) then
    return
  end
  redis.call('DEL', k('due-order'))
  local due = redis.call('ZRANGE', k('due'), 0, -1, 'WITHSCORES')
  for i = 1, #due, 2 do redis.call('ZADD', k('due-order'), due[i + 1], order_member_of(due[i])) end
end

-- The rank in the poll's order of the first member after (score, member).
local function order_rank_after(score, member)
  local lo = redis.call('ZCOUNT', k('due-order'), '-inf', '(' .. score)
  local hi = redis.call('ZCOUNT', k('due-order'), '-inf', score)
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if redis.call('ZRANGE', k('due-order'), mid, mid)[1] <= member then lo = mid + 1 else hi = mid end
  end
  return lo
end

-- Waiting executes due before A.before, in the order (next fire time,
-- priority highest first, id), at most A.limit, after the cursor
-- (A.after_time, A.after_priority, A.after_id) when one is given; then,
-- with room left, waiting ones with no next fire time. The page reads the
-- poll's order (`due-order`) from the cursor on, and only its own rows.
C.due = function()
  local limit, before = tonumber(A.limit), tonumber(A.before)
  order_checked(A.before)
  local rank = 0
  if tonumber(A.after_time) then
    rank = order_rank_after(A.after_time, order_member(tonumber(A.after_priority), tonumber(A.after_id)))
  end
  local out = {}
  local done = false
  while not done and #out < limit do
    -- At most 100 at a time: a member mended below reads its chunk again.
    local chunk = redis.call('ZRANGE', k('due-order'), rank, rank + math.min(limit - #out, 100) - 1, 'WITHSCORES')
    if #chunk == 0 then break end
    for i = 1, #chunk, 2 do
      local member, score = chunk[i], chunk[i + 1]
      if tonumber(score) >= before then
        done = true
        break
      end
      -- Formatted as an integer: concatenated as a number, an id of 15
      -- digits or more would be written in exponent form.
      local id = s(tonumber(string.sub(member, 12)))
      local row = flat(execute_key(id))
      local state, nxt, prio = '', nil, 0
      for j = 1, #row, 2 do
        local field = row[j]
        if field == 'state' then
          state = row[j + 1]
        elseif field == 'next_fire_time' then
          nxt = row[j + 1]
        elseif field == 'priority' then
          prio = tonumber(row[j + 1]) or 0
        end
      end
      if state == 'waiting' and tonumber(nxt) == tonumber(score) and order_member(prio, tonumber(id)) == member then
        out[#out + 1] = row
        rank = rank + 1
      else
        -- Left behind by an older build: put where the hash says, and the
        -- ranks after it moved, so the page goes on after the last row
        -- read.
        redis.call('ZREM', k('due-order'), member)
        if state == 'waiting' and tonumber(nxt) then
          redis.call('ZADD', k('due-order'), nxt, order_member(prio, tonumber(id)))
        end
        rank = order_rank_after(score, member)
        break
      end
    end
  end
  if #out < limit then
    local unset = redis.call('SMEMBERS', k('due-unset'))
    table.sort(unset, by_number)
    for _, id in ipairs(unset) do
      if #out >= limit then break end
      out[#out + 1] = flat(execute_key(id))
    end
  end
  return out
end

C.orphaned_executes = function()
  local ids = {}
  for _, id in ipairs(redis.call('SMEMBERS', k('running'))) do
    local key = execute_key(id)
    if not live(g(key, 'node_id'), g(key, 'incarnation')) then ids[#ids + 1] = id end
  end
  table.sort(ids, by_number)
  local out = {}
  for i = 1, math.min(#ids, tonumber(A.limit)) do out[i] = flat(execute_key(ids[i])) end
  return out
end

-- The open fires of the incarnations `pick` (node, incarnation) chooses,
-- as their indexes (see `owner_key`) hold them, and every open fire in no
-- index: what a sweep then reads one by one, for the fields that decide.
-- The set operations run in the server's own code, so a sweep costs what
-- it may find, not what is open (14,000 fires at 10,000 a second).
local function open_candidates(pick)
  local out, indexes = {}, {}
  for _, owner in ipairs(redis.call('SMEMBERS', k('open-owners'))) do
    local node, inc = string.match(owner, '^(.*):(%d+)$')
    local key = owner_key(owner)
    local alive = live(node, inc)
    if alive then
      indexes[#indexes + 1] = key
      if pick(node, inc, true) then
        for _, id in ipairs(redis.call('SINTER', k('open'), key)) do out[#out + 1] = id end
      end
    elseif redis.call('SINTERSTORE', key, key, k('open')) == 0 then
      -- Kept to its fires still open (one an older build ended stays in
      -- the index until then); none left, the incarnation leaves the list.
      redis.call('SREM', k('open-owners'), owner)
    else
      indexes[#indexes + 1] = key
      if pick(node, inc, false) then
        for _, id in ipairs(redis.call('SMEMBERS', key)) do out[#out + 1] = id end
      end
    end
  end
  for _, id in ipairs(redis.call('SDIFF', k('open'), unpack(indexes))) do out[#out + 1] = id end
  return out
end

-- What a sweep reads of an open fire, with one command.
local SWEEP_READ = { 'state', 'node_id', 'incarnation', 'fire_time', 'claimed_at', 'cancel_at' }

-- Fires of `ids`, those `keep` accepts (given what SWEEP_READ reads), by
-- fire time then id, at most A.limit.
local function fires_of(ids, keep)
  local chosen = {}
  for _, id in ipairs(ids) do
    local f = fire_key(id)
    local row = fields(f, SWEEP_READ)
    if keep(row) then chosen[#chosen + 1] = { tonumber(row.fire_time), tonumber(id), f } end
  end
  table.sort(chosen, function(a, b)
    if a[1] ~= b[1] then return a[1] < b[1] end
    return a[2] < b[2]
  end)
  local out = {}
  for i = 1, math.min(#chosen, tonumber(A.limit)) do out[i] = flat(chosen[i][3]) end
  return out
end

-- Whether an incarnation is not live.
local function dead(_, _, alive) return not alive end
-- Whether an incarnation is the one a command names.
local function named(node, inc) return node == A.node and inc == A.inc end

C.orphaned_fires = function()
  return fires_of(open_candidates(dead), function(row) return not live(row.node_id, row.incarnation) end)
end

C.claimed_by = function()
  local before = tonumber(A.before)
  return fires_of(open_candidates(named), function(row)
    return row.state == 'claimed' and named(row.node_id, row.incarnation)
      and tonumber(row.fire_time) < before and tonumber(row.claimed_at) < before
  end)
end

-- The node's open fires a newer fire asked to stop (cancel overlap policy).
C.cancel_requests = function()
  local out = {}
  for _, id in ipairs(open_candidates(named)) do
    local row = fields(fire_key(id), SWEEP_READ)
    if row.cancel_at ~= '' and named(row.node_id, row.incarnation) then
      out[#out + 1] = tonumber(id)
    end
  end
  table.sort(out)
  return out
end

C.pending_due = function()
  local out = {}
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', k('pending'), '-inf', '(' .. A.before, 'LIMIT', 0, A.limit)) do
    out[#out + 1] = flat(fire_key(id))
  end
  return out
end

-- Newest first from a sorted set scored by id, below A.before_id: the
-- records `keep` accepts, at most A.limit.
local function newest(index, record_key, keep)
  local max = '+inf'
  if A.before_id ~= '' then max = '(' .. A.before_id end
  local limit = tonumber(A.limit)
  local out = {}
  while #out < limit do
    local ids = redis.call('ZREVRANGEBYSCORE', k(index), max, '-inf', 'LIMIT', 0, 500)
    if #ids == 0 then break end
    for _, id in ipairs(ids) do
      local key = record_key(id)
      if keep(key) then
        out[#out + 1] = flat(key)
        if #out >= limit then break end
      end
    end
    max = '(' .. ids[#ids]
  end
  return out
end

-- The same from a list of ids in any order (the members of a state's own
-- index), sorted here.
local function newest_of(ids, record_key, keep)
  local max = tonumber(A.before_id)
  local below = {}
  for _, id in ipairs(ids) do
    if max == nil or tonumber(id) < max then below[#below + 1] = id end
  end
  table.sort(below, function(a, b) return tonumber(a) > tonumber(b) end)
  local limit = tonumber(A.limit)
  local out = {}
  for _, id in ipairs(below) do
    if #out >= limit then break end
    local key = record_key(id)
    if keep(key) then out[#out + 1] = flat(key) end
  end
  return out
end

-- Ledger rows, newest first. A state filter reads that state's own index
-- when it is the smaller read: the open fires (bounded by the pools), the
-- pending ones (bounded by retries), or a finished state that is a small
-- part of the ledger (by fire time, within since/upto); else the ledger is
-- walked newest first, so a filter no row matches never reads every record.
C.fires = function()
  local since, upto = tonumber(A.since), tonumber(A.upto)
  local keep = function(f)
    if A.state ~= '' and g(f, 'state') ~= A.state then return false end
    if A.execute ~= '' and g(f, 'execute_id') ~= A.execute then return false end
    if A.node ~= '' and g(f, 'node_id') ~= A.node then return false end
    if A.error ~= '' and not string.find(string.lower(g(f, 'error')), A.error, 1, true) then return false end
    local t = tonumber(g(f, 'fire_time'))
    return t ~= nil and (since == nil or t >= since) and (upto == nil or t < upto)
  end
  local ids
  if OPEN[A.state] then
    local index = 'open'
    if A.job ~= '' then index = 'job-open:' .. A.job end
    ids = redis.call('SMEMBERS', k(index))
  elseif A.state == 'pending' then
    ids = redis.call('ZRANGE', k('pending'), 0, -1)
  elseif A.state ~= '' and A.job == '' then
    local done = k('done:' .. A.state)
    if redis.call('ZCARD', done) * 8 < redis.call('ZCARD', k('fires')) then
      local upper = '+inf'
      if upto ~= nil then upper = '(' .. A.upto end
      ids = redis.call('ZRANGEBYSCORE', done, since or '-inf', upper)
    end
  end
  if ids then return newest_of(ids, fire_key, keep) end
  local index = 'fires'
  if A.job ~= '' then index = 'job-fires:' .. A.job end
  return newest(index, fire_key, keep)
end

C.change_log = function()
  return newest('change-log', function(id) return k('change:' .. id) end, function(c)
    return A.target == '' or g(c, 'target') == A.target
  end)
end

-- A job by name: its hash, then (with A.executes) its executes' hashes;
-- nothing when there is no such job.
C.job = function()
  local id = redis.call('HGET', k('jobs'), A.name)
  if not id then return {} end
  local out = { flat(k('job:' .. id)) }
  if A.executes == '1' then
    local ids = redis.call('SMEMBERS', k('job-executes:' .. id))
    table.sort(ids, by_number)
    for _, e in ipairs(ids) do out[#out + 1] = flat(execute_key(e)) end
  end
  return out
end

C.jobs_by_id = function()
  local out = {}
  for _, id in ipairs(A.ids) do
    local key = k('job:' .. id)
    if exists(key) then out[#out + 1] = flat(key) end
  end
  return out
end

-- A page of jobs by name, after A.after, filtered by state, handler and a
-- lower-case text the name contains.
C.jobs_page = function()
  local min = '-'
  if A.after ~= '' then min = '(' .. A.after end
  local limit = tonumber(A.limit)
  local out = {}
  while #out < limit do
    local names = redis.call('ZRANGEBYLEX', k('job-order'), min, '+', 'LIMIT', 0, 500)
    if #names == 0 then break end
    for _, name in ipairs(names) do
      local id = redis.call('HGET', k('jobs'), name)
      local key = k('job:' .. (id or ''))
      if id and (A.state == '' or g(key, 'state') == A.state) and (A.handler == '' or g(key, 'handler') == A.handler)
        and (A.search == '' or string.find(string.lower(name), A.search, 1, true)) then
        out[#out + 1] = flat(key)
        if #out >= limit then break end
      end
    end
    min = '(' .. names[#names]
  end
  return out
end

C.chain_parents = function()
  local out = {}
  for _, name in ipairs(redis.call('SMEMBERS', k('parents'))) do
    local id = redis.call('HGET', k('jobs'), name)
    if id and redis.call('SCARD', k('children:' .. name)) > 0 then out[#out + 1] = id end
  end
  return out
end

C.nodes = function()
  local out = {}
  for _, node in ipairs(redis.call('SMEMBERS', k('nodes'))) do
    local key = k('node:' .. node)
    if exists(key) then out[#out + 1] = flat(key) end
  end
  return out
end

-- The live nodes' payload schemas: node id, JSON text, node id, ...
C.payload_schemas = function()
  local out = {}
  for _, node in ipairs(redis.call('SMEMBERS', k('nodes'))) do
    local schemas = redis.call('HGET', k('node-schemas'), node)
    if schemas and g(k('node:' .. node), 'state') == 'live' then
      out[#out + 1] = node
      out[#out + 1] = schemas
    end
  end
  return out
end

C.changes = function() return redis.call('GET', k('changes')) or '0' end

-- The calendars (their hashes), the executes that name one and wait, are
-- paused or complete, each with its job's state as `job_state` (with
-- A.users), and the calendars' version.
C.calendars = function()
  local calendars = {}
  for _, name in ipairs(redis.call('SMEMBERS', k('calendars'))) do
    calendars[#calendars + 1] = flat(k('calendar:' .. name))
  end
  local users = {}
  if A.users == '1' then
    for _, id in ipairs(redis.call('SMEMBERS', k('calendared'))) do
      local key = execute_key(id)
      local state = g(key, 'state')
      if state == 'waiting' or state == 'paused' or state == 'complete' then
        local record = flat(key)
        record[#record + 1] = 'job_state'
        record[#record + 1] = g(k('job:' .. g(key, 'job_id')), 'state')
        users[#users + 1] = record
      end
    end
  end
  return { calendars, users, redis.call('GET', k('calendars-version')) or '0' }
end

-- ---- retention ----

C.purge_turn = function()
  local started = tonumber(redis.call('HGET', k('meta'), 'purge_started_at')) or 0
  if started > NOW - tonumber(A.every) then return 0 end
  redis.call('HSET', k('meta'), 'purge_started_at', NOWS)
  return 1
end

-- Enqueued work's own payload, or the empty string.
-- A work's payload and trace parent ('' for none of either).
C.work_run = function()
  local key = k('work:' .. A.id)
  return { redis.call('HGET', key, 'payload') or '', redis.call('HGET', key, 'trace_parent') or '' }
end

C.horizon = function() return redis.call('HGET', k('meta'), 'purged_before') or '' end

-- Since when the scheduler is on standby, or the empty string.
C.standby = function() return redis.call('HGET', k('meta'), 'paused_at') or '' end

C.horizon_advance = function()
  local horizon = tonumber(redis.call('HGET', k('meta'), 'purged_before'))
  if horizon == nil or horizon < tonumber(A.before) then redis.call('HSET', k('meta'), 'purged_before', A.before) end
  return 1
end

-- Finished fires of A.state scheduled before A.before, oldest first, each
-- job's newest A.keep kept, at most A.limit: how many were deleted.
C.fires_purge = function()
  local limit, keep = tonumber(A.limit), tonumber(A.keep)
  local deleted = 0
  local min = '-inf'
  while deleted < limit do
    local ids = redis.call('ZRANGEBYSCORE', k('done:' .. A.state), min, '(' .. A.before, 'WITHSCORES', 'LIMIT', 0, 500)
    if #ids == 0 then break end
    for i = 1, #ids, 2 do
      local id = ids[i]
      local f = fire_key(id)
      local job = g(f, 'job_id')
      local go = true
      if keep > 0 then
        local kept = redis.call('ZREVRANGE', k('job-fires:' .. job), keep - 1, keep - 1)
        go = kept[1] ~= nil and tonumber(id) < tonumber(kept[1])
      end
      if go then
        redis.call('ZREM', k('done:' .. A.state), id)
        delete_fire(id, f, g(f, 'execute_id'), job)
        deleted = deleted + 1
        if deleted >= limit then break end
      end
    end
    -- Past the last score read: fires kept at that time stay behind.
    min = '(' .. ids[#ids]
  end
  return deleted
end

-- Node ids and execute ids that open fires or running executes name.
local function named_by_open()
  local nodes, executes = {}, {}
  for _, id in ipairs(redis.call('SMEMBERS', k('open'))) do
    local f = fire_key(id)
    nodes[g(f, 'node_id')] = true
    executes[g(f, 'execute_id')] = true
  end
  for _, id in ipairs(redis.call('SMEMBERS', k('running'))) do nodes[g(execute_key(id), 'node_id')] = true end
  return nodes, executes
end

C.nodes_purge = function()
  local named = named_by_open()
  local before = tonumber(A.before)
  local deleted = 0
  for _, node in ipairs(redis.call('SMEMBERS', k('nodes'))) do
    local key = k('node:' .. node)
    local state = g(key, 'state')
    if (state == 'dead' or state == 'gone') and (tonumber(g(key, 'heartbeat_at')) or 0) < before and not named[node] then
      redis.call('DEL', key)
      redis.call('HDEL', k('node-schemas'), node)
      redis.call('SREM', k('nodes'), node)
      deleted = deleted + 1
    end
  end
  return deleted
end

C.executes_purge = function()
  local _, named = named_by_open()
  local before = tonumber(A.before)
  local deleted = 0
  -- Enqueued work whose fires have all ended and whose window has passed.
  for _, w in ipairs(redis.call('ZRANGEBYSCORE', k('work-age'), '-inf', '(' .. A.before)) do
    if deleted >= tonumber(A.limit) then break end
    local wk = k('work:' .. w)
    local job = g(wk, 'job_id')
    local open = work_open(w)
    local until_ms = tonumber(g(wk, 'unique_until'))
    if not open and not (until_ms and until_ms > NOW) then
      local key = g(wk, 'unique_key')
      if key ~= '' and redis.call('HGET', k('work-unique:' .. job), key) == w then
        redis.call('HDEL', k('work-unique:' .. job), key)
      end
      redis.call('DEL', wk)
      redis.call('ZREM', k('work-age'), w)
      deleted = deleted + 1
    end
  end
  local ids = redis.call('ZRANGEBYSCORE', k('complete'), '-inf', '(' .. A.before)
  for _, id in ipairs(ids) do
    if deleted >= tonumber(A.limit) then break end
    local key = execute_key(id)
    local last = tonumber(g(key, 'prev_fire_time')) or tonumber(g(key, 'start_time')) or 0
    if last < before and not named[id] then
      delete_execute(id)
      deleted = deleted + 1
    end
  end
  return deleted
end


-- The counts of the cluster's health gauges: overdue waiting executes and
-- the oldest one's time, open fires by state, stranded pending fires, and
-- recent fires by outcome (by fire time).
C.health = function()
  local overdue = redis.call('ZCOUNT', k('due'), '-inf', '(' .. A.overdue_before)
  local oldest = ''
  local first = redis.call('ZRANGE', k('due'), 0, 0, 'WITHSCORES')
  if #first == 2 and tonumber(first[2]) < tonumber(A.overdue_before) then oldest = first[2] end
  local claimed, running = 0, 0
  for _, id in ipairs(redis.call('SMEMBERS', k('open'))) do
    local state = g(fire_key(id), 'state')
    if state == 'claimed' then claimed = claimed + 1 elseif state == 'running' then running = running + 1 end
  end
  local out = { s(overdue), oldest, s(claimed), s(running), s(redis.call('ZCARD', k('pending'))),
    s(redis.call('ZCOUNT', k('pending'), '-inf', '(' .. A.stranded_before)) }
  for _, state in ipairs({ 'succeeded', 'failed', 'misfired' }) do
    out[#out + 1] = s(redis.call('ZCOUNT', k('done:' .. state), A.recent_since, '+inf'))
  end
  return out
end

-- A call of the library (see the top of lib.lua); the text that loads the
-- library ends by returning it (a script) or registering it (a function).
local function call(keys, args)
  P = keys[1]
  A = cjson.decode(args[2])
  BASE = tonumber(args[3])
  local clock = redis.call('TIME')
  NOW = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
  NOWS = s(NOW)
  return C[args[1]]()
end

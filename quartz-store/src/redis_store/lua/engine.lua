-- ---- nodes ----

C.register = function()
  local key = k('node:' .. A.node)
  if exists(key) then
    redis.call('HINCRBY', key, 'incarnation', 1)
  else
    redis.call('HSET', key, 'incarnation', NOWS, 'busy', '0')
  end
  redis.call('HSET', key, 'node_id', A.node, 'host', A.host, 'pid', A.pid, 'weight', A.weight,
    'handlers', A.handlers, 'state', 'live', 'registered_at', NOWS, 'heartbeat_at', NOWS)
  if A.dead_after ~= '' then redis.call('HSET', key, 'dead_after', A.dead_after) else redis.call('HDEL', key, 'dead_after') end
  redis.call('SADD', k('nodes'), A.node)
  return flat(key)
end

C.heartbeat = function()
  if not live(A.node, A.inc) then return 0 end
  redis.call('HSET', k('node:' .. A.node), 'heartbeat_at', NOWS, 'busy', A.busy)
  return 1
end

C.retire = function()
  local key = k('node:' .. A.node)
  if not live(A.node, A.inc) or tonumber(g(key, 'heartbeat_at')) >= NOW - tonumber(A.dead_after) then return 0 end
  redis.call('HSET', key, 'state', 'dead')
  return 1
end

C.leave = function()
  if not live(A.node, A.inc) then return 0 end
  redis.call('HSET', k('node:' .. A.node), 'state', 'gone')
  return 1
end

-- ---- executes ----

C.update = function()
  local out = {}
  for i, u in ipairs(A.updates) do
    if cas_execute(u) then
      local job = g(execute_key(u.id), 'job_id')
      for _, r in ipairs(u.records) do
        insert_fire(u.id, job, r.from, '1', '', '0', r.state, r.reason, r['until'], r.count, '')
      end
      out[i] = 1
    else
      out[i] = 0
    end
  end
  return out
end

-- Claims, in order: for each, the fire's id, or 0 when lost. A claim of a
-- job that disallows concurrency (x) is lost while a fire of the job is
-- open. A fire the ledger holds already is not claimed, but the execute
-- still advances past it.
C.claim = function()
  local out = {}
  for i, o in ipairs(A.claims) do
    local id = nil
    local job = g(execute_key(o.id), 'job_id')
    local blocked = o.x == '1' and redis.call('SCARD', k('job-open:' .. job)) > 0
    if not blocked and cas_execute(o) then
      id = insert_fire(o.id, job, o.ft, o.at, o.node, o.inc, 'claimed', '', '', '1', '')
    end
    out[i] = id or 0
  end
  return out
end

C.mark_error = function()
  local key = execute_key(A.id)
  if not exists(key) then return 0 end
  redis.call('HSET', key, 'state', 'error', 'error', A.reason, 'updated_at', NOWS)
  reindex_execute(A.id)
  return 1
end

-- ---- the fire lifecycle ----

-- Fenced starts (or, with confirm, confirmations): id and start time of
-- each fire started.
C.start = function()
  local out = {}
  if not live(A.node, A.inc) then return out end
  local from = CLAIMED
  if A.confirm == '1' then from = RUNNING end
  for _, id in ipairs(A.ids) do
    local f = held(id, from, A.node, A.inc)
    if f then
      local at = math.max(tonumber(g(f, 'fire_time')), NOW)
      if A.confirm ~= '1' then set_fire_state(id, f, 'running') end
      redis.call('HSET', f, 'started_at', s(at))
      out[#out + 1] = id
      out[#out + 1] = s(at)
    end
  end
  return out
end

C.succeed_all = function()
  local out = {}
  for _, id in ipairs(A.ids) do
    local f = held(id, RUNNING, A.node, A.inc)
    if f then
      end_fire(id, f, 'succeeded', '')
      out[#out + 1] = id
    end
  end
  return out
end

-- One fenced transition: from the states a mode names, to its end.
local TRANSITIONS = {
  finish = { from = RUNNING },
  misfire = { from = OPEN, to = 'misfired', clear_start = true },
  skip = { from = CLAIMED, to = 'skipped' },
  fail_claimed = { from = CLAIMED, to = 'failed' },
}

C.transition = function()
  local mode = TRANSITIONS[A.mode]
  local f = held(A.id, mode.from, A.node, A.inc)
  if not f then return 0 end
  end_fire(A.id, f, mode.to or A.state, A.text)
  if mode.clear_start then redis.call('HDEL', f, 'started_at') end
  return 1
end

C.release = function()
  local f = held(A.id, CLAIMED, A.node, A.inc)
  if not f then return 0 end
  redis.call('HDEL', f, 'node_id')
  redis.call('HSET', f, 'incarnation', '0')
  return 1
end

C.time_out = function()
  local f = held(A.id, RUNNING, A.node, A.inc)
  if not f then return 0 end
  redis.call('HSET', f, 'timed_out_at', NOWS, 'error', A.text)
  return 1
end

C.take_over = function()
  local f = held(A.id, CLAIMED, A.onode, A.oinc)
  if not f then return 0 end
  redis.call('HSET', f, 'node_id', A.node, 'incarnation', A.inc, 'claimed_at', NOWS)
  return 1
end

C.abandon = function()
  local f = held(A.id, RUNNING, A.onode, A.oinc)
  if not f then return 0 end
  end_fire(A.id, f, 'abandoned', 'node died mid-run; the job does not request recovery')
  return 1
end

-- An orphaned running fire failed and its next attempt claimed by this
-- node; nothing is written when that attempt exists already.
C.rerun = function()
  local f = held(A.id, RUNNING, A.onode, A.oinc)
  if not f then return 0 end
  local execute, job, fire_time = g(f, 'execute_id'), g(f, 'job_id'), g(f, 'fire_time')
  local attempt = s(tonumber(g(f, 'attempt')) + 1)
  if redis.call('HEXISTS', k('fire-keys'), unique_key(execute, job, fire_time, attempt)) == 1 then return 0 end
  end_fire(A.id, f, 'failed', 'node died mid-run; recovered as attempt ' .. attempt)
  return insert_fire(execute, job, fire_time, attempt, A.node, A.inc, 'claimed', '', '', '1', '')
end

-- An attempt's end with its pending follow-up: {'not_owned'},
-- {'recorded'} or {'pending', id, due}.
local function end_with_follow_up(f, state, clear_start, due, one_per_execute)
  end_fire(A.id, f, state, A.text)
  if clear_start then redis.call('HDEL', f, 'started_at') end
  local next = next_pending(f, due, one_per_execute)
  if next then return { 'pending', next[1], next[2] } end
  return { 'recorded' }
end

C.fail_retry = function()
  local f = held(A.id, RUNNING, A.node, A.inc)
  if not f then return { 'not_owned' } end
  return end_with_follow_up(f, 'failed', false, NOW + math.max(tonumber(A.delay), 0), false)
end

C.misfire_late = function()
  local f = held(A.id, OPEN, A.node, A.inc)
  if not f then return { 'not_owned' } end
  return end_with_follow_up(f, 'misfired', true, NOW, A.one == '1')
end

-- A success and its job's chain: {0} when not this incarnation's; else
-- {1, fire id, child job id, ...} for the children's claimed fires.
C.succeed_chain = function()
  local f = held(A.id, RUNNING, A.node, A.inc)
  if not f then return { 0 } end
  end_fire(A.id, f, 'succeeded', '')
  local execute, fire_time = g(f, 'execute_id'), g(f, 'fire_time')
  local parent = g(k('job:' .. g(f, 'job_id')), 'name')
  local chained = {}
  if parent ~= '' then
    for _, child in ipairs(redis.call('SMEMBERS', k('children:' .. parent))) do
      local state = g(k('job:' .. child), 'state')
      if state ~= '' then
        if state == 'enabled' then
          insert_fire(execute, child, fire_time, '1', A.node, A.inc, 'claimed', '', '', '1', '')
        else
          insert_fire(execute, child, fire_time, '1', A.node, A.inc, 'skipped', 'the child job is paused', '', '1', '')
        end
        local id = redis.call('HGET', k('fire-keys'), unique_key(execute, child, fire_time, '1'))
        if id and held(id, CLAIMED, A.node, A.inc) then chained[#chained + 1] = { id, child } end
      end
    end
  end
  table.sort(chained, function(a, b) return tonumber(a[1]) < tonumber(b[1]) end)
  local out = { 1 }
  for _, c in ipairs(chained) do
    out[#out + 1] = c[1]
    out[#out + 1] = c[2]
  end
  return out
end

C.pending_claim = function()
  local f = fire_key(A.id)
  if g(f, 'state') ~= 'pending' then return 'gone' end
  if A.x == '1' and redis.call('SCARD', k('job-open:' .. g(f, 'job_id'))) > 0 then return 'blocked' end
  if not live(A.node, A.inc) then return 'gone' end
  set_fire_state(A.id, f, 'claimed')
  redis.call('HSET', f, 'node_id', A.node, 'incarnation', A.inc, 'claimed_at', NOWS)
  return 'won'
end

-- After an execute's hash was edited by hand: its indexes as its fields say.
C.reindex_execute = function()
  if not exists(execute_key(A.id)) then return 0 end
  reindex_execute(A.id)
  return 1
end

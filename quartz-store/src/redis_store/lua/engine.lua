-- ---- nodes ----

C.register = function()
  local key = k('node:' .. A.node)
  if exists(key) then
    redis.call('HINCRBY', key, 'incarnation', 1)
  else
    redis.call('HSET', key, 'incarnation', NOWS, 'busy', '0')
  end
  redis.call('HSET', key, 'node_id', A.node, 'host', A.host, 'pid', A.pid, 'weight', A.weight,
    'handlers', A.handlers, 'state', 'live', 'registered_at', NOWS, 'heartbeat_at', NOWS, 'pending_index', '1')
  if A.dead_after ~= '' then redis.call('HSET', key, 'dead_after', A.dead_after) else redis.call('HDEL', key, 'dead_after') end
  -- Payload schemas apart from the node's hash, which every heartbeat reads.
  if A.schemas ~= '' then redis.call('HSET', k('node-schemas'), A.node, A.schemas) else redis.call('HDEL', k('node-schemas'), A.node) end
  redis.call('SADD', k('nodes'), A.node)
  redis.call('SADD', k('open-owners'), owner_of(A.node, g(key, 'incarnation')))
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

-- The fires of an execute claimed and not started whose time is after now,
-- deleted: the row took an edited schedule (see ExecuteCas::recomputes).
-- Found among its job's open fires.
local function unclaim_ahead(execute, job)
  for _, id in ipairs(redis.call('SMEMBERS', k('job-open:' .. job))) do
    local f = fire_key(id)
    local row = fire_read(f)
    if row.execute_id == execute and row.state == 'claimed' and (tonumber(row.fire_time) or 0) > NOW then
      redis.call('SREM', k('open'), id)
      redis.call('SREM', k('job-open:' .. job), id)
      disown(owner_of(row.node_id, row.incarnation), id)
      delete_fire(id, f, execute, job)
    end
  end
end

C.update = function()
  local out = {}
  for i, u in ipairs(A.updates) do
    local cur = cas_execute(u)
    if cur then
      local job = cur.job_id
      if u.un == '1' then unclaim_ahead(u.id, job) end
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

-- The oldest fire of an execute's job that waits under an overlap policy
-- (pending, first attempt, due at its own time; a chained child's waiting
-- fires share its parent's execute), or nil.
local function waiting_of(execute, job)
  local best, best_time = nil, nil
  for _, p in ipairs(pending_of(execute)) do
    local pk = fire_key(p)
    local t = tonumber(g(pk, 'fire_time'))
    -- By fire time: past the first one's time, none is older.
    if best_time and t > best_time then break end
    if g(pk, 'attempt') == '1' and g(pk, 'due_at') == g(pk, 'fire_time') and g(pk, 'job_id') == job
      and (not best or tonumber(p) < tonumber(best)) then
      best, best_time = p, t
    end
  end
  return best
end

-- Why a fire under an overlap policy does not run, or nil when it waits.
local function skip_reason(ov, open, waiting, full)
  if ov == 'skip' and open then
    return 'overlap policy skip: fire ' .. open .. ' of the job was still running'
  elseif ov == 'skip' and waiting then
    return 'overlap policy skip: fire ' .. waiting .. ' of the trigger was still waiting'
  elseif ov == 'skip' then
    return 'overlap policy skip: concurrency limit "' .. full[1] .. '" full (' .. full[2] .. ' of ' .. full[3] ..
      ' fires claimed or running)'
  elseif ov == 'buffer_one' and waiting then
    return 'overlap policy buffer_one: fire ' .. waiting ..
      ' of the trigger already waits for the job\'s running fire or its concurrency limit'
  end
  return nil
end

-- An exclusive claim under an overlap policy (ov) while its job has a fire
-- open or its trigger a fire waiting, its execute advanced: the fire
-- recorded as skipped, or as a pending fire due at its time. Under cancel
-- the trigger's older waiting fires are skipped (replaced), the job's open
-- fires are asked to stop, and the change counter moves, so that their
-- nodes look.
local function overlapped(o, job, open, waiting, full)
  local ov = o.ov
  if ov == '' then ov = 'buffer_all' end
  local skip = skip_reason(ov, open, waiting, full)
  if skip then
    insert_fire(o.id, job, o.ft, o.at, '', '0', 'skipped', skip, '', '1', '')
    return
  end
  local id = insert_fire(o.id, job, o.ft, o.at, '', '0', 'pending', '', '', '1', o.ft)
  -- Cancel stops the job's own fires, not those of other jobs that fill
  -- its concurrency key.
  if not id or ov ~= 'cancel' or not open then return end
  for _, p in ipairs(pending_of(o.id)) do
    local pk = fire_key(p)
    if p ~= id and g(pk, 'attempt') == '1' and g(pk, 'due_at') == g(pk, 'fire_time')
      and g(pk, 'job_id') == job then
      end_fire(p, pk, 'skipped', 'overlap policy cancel: replaced by fire ' .. id .. ' before it started')
    end
  end
  for _, fid in ipairs(redis.call('SMEMBERS', k('job-open:' .. job))) do
    local fk = fire_key(fid)
    if g(fk, 'cancel_at') == '' then redis.call('HSET', fk, 'cancel_at', NOWS) end
  end
  redis.call('INCR', k('changes'))
end

-- Claims, in order: for each, the fire's id, or 0 when not won. A claim of
-- a job that disallows concurrency (x) is lost while a fire of the job is
-- open; one under an overlap policy (ov), while a fire of the job is open
-- or one of its trigger waits, advances its execute and records the fire
-- as skipped or pending. A fire the ledger holds already is not claimed,
-- but the execute still advances past it.
C.claim = function()
  local out = {}
  for i, o in ipairs(A.claims) do
    local id = nil
    local cur = cas_read(o.id)
    local job = cur.job_id
    -- Under allow, the job's own fires do not hold this one; its
    -- concurrency limit still may.
    local open = o.x == '1' and o.ov ~= 'allow' and redis.call('SRANDMEMBER', k('job-open:' .. job))
    local full = o.x == '1' and key_full(job)
    local waiting = o.x == '1' and (o.ov ~= '' or full) and waiting_of(o.id, job)
    if open and o.ov == '' then
      -- lost: the job's running fire holds the trigger
    elseif open or waiting or full then
      if cas_execute(o, cur) then overlapped(o, job, open or nil, waiting or nil, full or nil) end
    elseif cas_execute(o, cur) then
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
    local f, row = held_row(id, from, A.node, A.inc)
    if f then
      local at = s(math.max(tonumber(row.fire_time), NOW))
      if A.confirm ~= '1' then
        set_fire_state(id, f, 'running', row, { 'started_at', at })
      else
        redis.call('HSET', f, 'started_at', at)
      end
      out[#out + 1] = id
      out[#out + 1] = at
    end
  end
  return out
end

-- A handler's run, as its node saw it ({start, finish}, or {} when not
-- known): the fire's start and finish.
local function set_ran(f, ran)
  if ran and ran[1] then redis.call('HSET', f, 'started_at', ran[1], 'finished_at', ran[2]) end
end

C.succeed_all = function()
  local out = {}
  for i, id in ipairs(A.ids) do
    local f, row = held_row(id, RUNNING, A.node, A.inc)
    if f then
      end_fire(id, f, 'succeeded', '', row)
      set_ran(f, A.spans and A.spans[i])
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
  set_ran(f, A.ran)
  return 1
end

C.release = function()
  local f = held(A.id, CLAIMED, A.node, A.inc)
  if not f then return 0 end
  redis.call('HDEL', f, 'node_id')
  redis.call('HSET', f, 'incarnation', '0')
  disown(owner_of(A.node, A.inc), A.id)
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
  disown(owner_of(A.onode, A.oinc), A.id)
  own(owner_of(A.node, A.inc), A.id)
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
  local out = end_with_follow_up(f, 'failed', false, NOW + math.max(tonumber(A.delay), 0), false)
  set_ran(f, A.ran)
  return out
end

C.misfire_late = function()
  local f = held(A.id, OPEN, A.node, A.inc)
  if not f then return { 'not_owned' } end
  return end_with_follow_up(f, 'misfired', true, NOW, A.one == '1')
end

-- A success and its job's chain: {0} when not this incarnation's; else
-- {1, fire id, child job id, due, ...} for the children's claimed fires
-- (due 0) and waiting ones (a child that disallows concurrency or shares a
-- limit: pending, due at the fire time, claimed exclusively as a trigger's
-- waiting fire is).
C.succeed_chain = function()
  local f = held(A.id, RUNNING, A.node, A.inc)
  if not f then return { 0 } end
  end_fire(A.id, f, 'succeeded', '')
  set_ran(f, A.ran)
  local execute, fire_time = g(f, 'execute_id'), g(f, 'fire_time')
  local parent = g(k('job:' .. g(f, 'job_id')), 'name')
  local chained = {}
  if parent ~= '' then
    for _, child in ipairs(redis.call('SMEMBERS', k('children:' .. parent))) do
      local state = g(k('job:' .. child), 'state')
      if state ~= '' then
        local jk = k('job:' .. child)
        local waits = g(jk, 'allow_concurrent') == '0' or g(jk, 'limit_key') ~= ''
        if state ~= 'enabled' then
          insert_fire(execute, child, fire_time, '1', A.node, A.inc, 'skipped', 'the child job is paused', '', '1', '')
        elseif waits then
          local id = insert_fire(execute, child, fire_time, '1', '', '0', 'pending', '', '', '1', fire_time)
          if id then chained[#chained + 1] = { id, child, fire_time } end
        else
          insert_fire(execute, child, fire_time, '1', A.node, A.inc, 'claimed', '', '', '1', '')
        end
        local id = redis.call('HGET', k('fire-keys'), unique_key(execute, child, fire_time, '1'))
        if id and held(id, CLAIMED, A.node, A.inc) then chained[#chained + 1] = { id, child, 0 } end
      end
    end
  end
  table.sort(chained, function(a, b) return tonumber(a[1]) < tonumber(b[1]) end)
  local out = { 1 }
  for _, c in ipairs(chained) do
    out[#out + 1] = c[1]
    out[#out + 1] = c[2]
    out[#out + 1] = c[3]
  end
  return out
end

C.pending_claim = function()
  local f = fire_key(A.id)
  if g(f, 'state') ~= 'pending' then return 'gone' end
  -- The whole scheduler on standby: a node that has not seen it yet claims
  -- nothing either.
  if redis.call('HEXISTS', k('meta'), 'paused_at') == 1 then return 'blocked' end
  -- A trigger with an overlap policy makes its pending fires exclusive
  -- too; those waiting under one run in the order of their fire times.
  -- A fire of a trigger an edit replaced (or deleted) waits for the job's
  -- open fires: the overlap policy that held it is gone with its trigger.
  local execute = g(f, 'execute_id')
  local ov = ''
  local gone = false
  if exists(execute_key(execute)) then ov = g(execute_key(execute), 'overlap') else gone = tonumber(execute) > 0 end
  local job = g(f, 'job_id')
  if (A.x == '1' or gone or (ov ~= '' and ov ~= 'allow'))
    and redis.call('SCARD', k('job-open:' .. job)) > 0 then return 'blocked' end
  if key_full(job) then return 'blocked' end
  local limited = g(k('job:' .. job), 'limit_key') ~= ''
  if limited or ov == 'buffer_one' or ov == 'buffer_all' or ov == 'cancel' then
    for _, p in ipairs(pending_of(execute, g(f, 'fire_time'))) do
      local pk = fire_key(p)
      if g(pk, 'attempt') == '1' and g(pk, 'job_id') == job and tonumber(g(pk, 'due_at')) <= NOW then
        return 'blocked'
      end
    end
  end
  if not live(A.node, A.inc) then return 'gone' end
  -- The owner first: the open fire's index is the one its fields name.
  redis.call('HSET', f, 'node_id', A.node, 'incarnation', A.inc, 'claimed_at', NOWS)
  set_fire_state(A.id, f, 'claimed')
  return 'won'
end

-- After an execute's hash was edited by hand: its indexes as its fields say.
C.reindex_execute = function()
  if not exists(execute_key(A.id)) then return 0 end
  reindex_execute(A.id)
  return 1
end

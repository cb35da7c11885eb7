-- ---- jobs ----

local JOB_FIELDS = { 'name', 'handler', 'payload', 'description', 'requests_recovery', 'allow_concurrent',
  'timeout_ms', 'max_attempts', 'backoff_ms', 'backoff_max_ms', 'parent_job', 'concurrency_limit',
  'concurrency_key', 'limit_key' }
local EXECUTE_FIELDS = { 'kind', 'cron_expression', 'time_zone', 'interval_ms', 'start_time', 'end_time',
  'repeat_limit', 'misfire_policy', 'priority', 'schedule_sig', 'calendar', 'dst_skipped', 'dst_repeated',
  'jitter_ms', 'jitter_seed', 'catch_up_ms', 'overlap', 'next_fire_time' }

-- The calendars new triggers name must exist as read (the version every
-- calendar change and every trigger naming a calendar moves): an error
-- reply, or nil.
local function calendars_as_read(names)
  if #names == 0 then return nil end
  if (redis.call('GET', k('calendars-version')) or '0') ~= A.calendars_version then return { 'retry' } end
  for _, name in ipairs(names) do
    if redis.call('SISMEMBER', k('calendars'), name) == 0 then return { 'unknown_calendar', name } end
  end
  return nil
end

-- Inserts a job's executes: each complete when it has no first fire time,
-- paused with a paused job, waiting otherwise.
local function insert_executes(job, executes)
  local paused = g(k('job:' .. job), 'state') == 'paused'
  for _, e in ipairs(executes) do
    local id = new_id('execute')
    local key = execute_key(id)
    redis.call('HSET', key, 'id', id, 'job_id', job, 'times_triggered', '0', 'calendar_stamp', '0',
      'updated_at', NOWS)
    for _, field in ipairs(EXECUTE_FIELDS) do set_if(key, field, e[field]) end
    local state = 'waiting'
    if e.next_fire_time == '' then state = 'complete' elseif paused then state = 'paused' end
    redis.call('HSET', key, 'state', state)
    redis.call('SADD', k('job-executes:' .. job), id)
    if e.calendar ~= '' then
      redis.call('SADD', k('calendared'), id)
      redis.call('INCR', k('calendars-version'))
    end
    reindex_execute(id)
  end
end

local function delete_executes(job)
  for _, id in ipairs(redis.call('SMEMBERS', k('job-executes:' .. job))) do delete_execute(id) end
  redis.call('DEL', k('job-executes:' .. job))
end

-- A job's place among the jobs of its concurrency key (limit-jobs:KEY).
local function unlink_limit(id, key)
  if key ~= '' then redis.call('SREM', k('limit-jobs:' .. key), id) end
end

local function write_job(id, j)
  local key = k('job:' .. id)
  unlink_limit(id, g(key, 'limit_key'))
  for _, field in ipairs(JOB_FIELDS) do put(key, field, j[field]) end
  if (j.limit_key or '') ~= '' then redis.call('SADD', k('limit-jobs:' .. j.limit_key), id) end
  redis.call('HSET', key, 'updated_at', NOWS)
end

local function link_parent(id, parent)
  if parent ~= '' then
    redis.call('SADD', k('children:' .. parent), id)
    redis.call('SADD', k('parents'), parent)
  end
end

local function unlink_parent(id, parent)
  if parent ~= '' then redis.call('SREM', k('children:' .. parent), id) end
end

C.job_create = function()
  local j = A.job
  if redis.call('HEXISTS', k('jobs'), j.name) == 1 then return { 'duplicate' } end
  if j.parent_job ~= '' and redis.call('HEXISTS', k('jobs'), j.parent_job) == 0 then
    return { 'unknown_job', j.parent_job }
  end
  local refused = calendars_as_read(A.calendars)
  if refused then return refused end
  local id = new_id('job')
  redis.call('HSET', k('job:' .. id), 'id', id, 'state', 'enabled', 'created_at', NOWS, 'version', '1')
  write_job(id, j)
  redis.call('HSET', k('jobs'), j.name, id)
  redis.call('ZADD', k('job-order'), 0, j.name)
  link_parent(id, j.parent_job)
  insert_executes(id, A.executes)
  A.change.target_id = id
  changed(A.change)
  return { 'ok', id }
end

-- A job's or calendar's version ('1' for one stored before versions).
local function version_of(key)
  local v = g(key, 'version')
  if v == '' then return '1' end
  return v
end

-- A write made against another version than the stored one (A.expected,
-- when given): {'stale', kind, current, expected}, or nil.
local function stale(kind, key)
  if A.expected and A.expected ~= '' and version_of(key) ~= A.expected then
    return { 'stale', kind, version_of(key), A.expected }
  end
  return nil
end

local function step_version(key)
  redis.call('HSET', key, 'version', tostring(tonumber(version_of(key)) + 1))
end

-- The job of a name, as the caller read it (and at the version expected):
-- its id, or an error reply. A change of it moves its version on.
local function job_as_read()
  local id = redis.call('HGET', k('jobs'), A.name)
  if not id or (A.id and A.id ~= id) then return nil, { 'unknown_job', A.name } end
  local refused = stale('job', k('job:' .. id))
  if refused then return nil, refused end
  return id, nil
end

C.job_update = function()
  local id, refused = job_as_read()
  if refused then return refused end
  local j = A.job
  if j.name ~= A.name and redis.call('HEXISTS', k('jobs'), j.name) == 1 then return { 'duplicate' } end
  if j.parent_job ~= '' and redis.call('HEXISTS', k('jobs'), j.parent_job) == 0 then
    return { 'unknown_job', j.parent_job }
  end
  if A.executes then
    refused = calendars_as_read(A.calendars)
    if refused then return refused end
  end
  local key = k('job:' .. id)
  step_version(key)
  unlink_parent(id, g(key, 'parent_job'))
  write_job(id, j)
  link_parent(id, j.parent_job)
  if j.name ~= A.name then
    redis.call('HDEL', k('jobs'), A.name)
    redis.call('ZREM', k('job-order'), A.name)
    redis.call('HSET', k('jobs'), j.name, id)
    redis.call('ZADD', k('job-order'), 0, j.name)
  end
  if A.executes then
    delete_executes(id)
    insert_executes(id, A.executes)
  end
  A.change.target_id = id
  changed(A.change)
  return { 'ok', id }
end

-- A fire of the job by hand, pending and due now (execute '0': no
-- trigger's); two in one millisecond a millisecond apart: {'ok', fire, time}.
C.job_fire_now = function()
  local id, refused = job_as_read()
  if refused then return refused end
  local at = NOW
  local fire = insert_fire('0', id, s(at), '1', '', '0', 'pending', '', '', '1', s(at))
  while not fire do
    at = at + 1
    fire = insert_fire('0', id, s(at), '1', '', '0', 'pending', '', '', '1', s(at))
  end
  A.change.detail = 'fire ' .. fire .. ' by hand'
  A.change.target_id = id
  changed(A.change)
  return { 'ok', fire, s(at) }
end

-- Enqueued work: {'ok', work, fire, due} or {'duplicate_work', holder, due}
-- or {'unknown_job', name}.
C.job_enqueue = function()
  local job = redis.call('HGET', k('jobs'), A.name)
  if not job then return { 'unknown_job', A.name } end
  local due = NOW
  if A.at ~= '' then due = math.max(NOW, tonumber(A.at)) end
  if A.after ~= '' then due = NOW + tonumber(A.after) end
  local uk = k('work-unique:' .. job)
  if A.key ~= '' then
    local holder = redis.call('HGET', uk, A.key)
    if holder then
      local open, ft = work_open(holder)
      local until_ms = tonumber(g(k('work:' .. holder), 'unique_until'))
      if open or (until_ms and until_ms > NOW) then return { 'duplicate_work', holder, ft } end
      redis.call('HDEL', k('work:' .. holder), 'unique_key')
    end
  end
  local w = new_id('work')
  local row = { 'job_id', job, 'fire_time', s(due), 'created_at', NOWS }
  add_if(row, 'payload', A.payload)
  add_if(row, 'trace_parent', A.trace_parent)
  add_if(row, 'unique_key', A.key)
  if A.window ~= '' then add_if(row, 'unique_until', s(NOW + tonumber(A.window))) end
  redis.call('HSET', k('work:' .. w), unpack(row))
  if A.key ~= '' then redis.call('HSET', uk, A.key, w) end
  redis.call('ZADD', k('work-age'), NOW, w)
  local fire = insert_fire('-' .. w, job, s(due), '1', '', '0', 'pending', '', '', '1', s(due))
  redis.call('INCR', k('changes'))
  return { 'ok', w, fire, s(due) }
end

C.job_pause = function()
  local id, refused = job_as_read()
  if refused then return refused end
  local from, to, job_state = 'paused', 'waiting', 'enabled'
  if A.paused == '1' then from, to, job_state = 'waiting', 'paused', 'paused' end
  step_version(k('job:' .. id))
  redis.call('HSET', k('job:' .. id), 'state', job_state, 'updated_at', NOWS)
  for _, e in ipairs(redis.call('SMEMBERS', k('job-executes:' .. id))) do
    local key = execute_key(e)
    if g(key, 'state') == from then
      redis.call('HSET', key, 'state', to, 'updated_at', NOWS)
      reindex_execute(e)
    end
  end
  A.change.target_id = id
  changed(A.change)
  return { 'ok', id }
end

C.job_delete = function()
  local id, refused = job_as_read()
  if refused then return refused end
  local key = k('job:' .. id)
  unlink_parent(id, g(key, 'parent_job'))
  unlink_limit(id, g(key, 'limit_key'))
  delete_executes(id)
  redis.call('HDEL', k('jobs'), A.name)
  redis.call('ZREM', k('job-order'), A.name)
  redis.call('DEL', key)
  A.change.target_id = id
  changed(A.change)
  return { 'ok', id }
end

-- A finished fire retried by hand: {'ok', id, attempt}, {'not_found'}
-- or {'refused', why}.
C.fire_retry = function()
  local f = fire_key(A.fire)
  if not exists(f) then return { 'not_found' } end
  local state = g(f, 'state')
  if state ~= 'failed' and state ~= 'abandoned' and state ~= 'misfired' then
    return { 'refused', 'fire ' .. A.fire .. ' is ' .. state .. ': only a failed, abandoned or misfired fire is retried' }
  end
  local job = g(f, 'job_id')
  local jkey = k('job:' .. job)
  if not exists(jkey) then return { 'refused', 'its job was deleted' } end
  local name = g(jkey, 'name')
  if g(jkey, 'state') == 'paused' then
    return { 'refused', 'job "' .. name .. '" is paused: resume it first, or fire it now' }
  end
  local execute, t = g(f, 'execute_id'), g(f, 'fire_time')
  local a = tonumber(g(f, 'attempt'))
  while true do
    local id = redis.call('HGET', k('fire-keys'), unique_key(execute, job, t, s(a + 1)))
    if not id then break end
    local st = g(fire_key(id), 'state')
    if st == 'claimed' or st == 'running' or st == 'pending' then
      return { 'refused', 'an attempt of this fire is open: fire ' .. id .. ' is ' .. st }
    end
    if st == 'succeeded' then return { 'refused', 'an attempt of this fire succeeded since: fire ' .. id } end
    a = a + 1
  end
  local id = insert_fire(execute, job, t, s(a + 1), '', '0', 'pending', '', '', '1', NOWS)
  A.change.target = name
  A.change.target_id = job
  A.change.detail = 'fire ' .. A.fire .. ' (' .. state .. '): attempt ' .. s(a + 1) .. ' is fire ' .. id
  changed(A.change)
  return { 'ok', id, s(a + 1) }
end

-- ---- calendars ----

-- Adds or replaces a calendar (with A.only_new, adds it only if none of that
-- name exists: {'calendar_exists'} otherwise) and reschedules its users, if
-- nothing changed since the caller read the calendars, the users' rows and
-- (for a revived row, u.js) its job's state: {'retry'} otherwise.
C.calendar_put = function()
  local key = k('calendar:' .. A.name)
  if A.only_new == '1' and redis.call('SISMEMBER', k('calendars'), A.name) == 1 then
    return { 'calendar_exists' }
  end
  if A.expected and A.expected ~= '' and redis.call('SISMEMBER', k('calendars'), A.name) == 0 then
    return { 'stale', 'calendar', '', A.expected }
  end
  local refused = stale('calendar', key)
  if refused then return refused end
  if (redis.call('GET', k('calendars-version')) or '0') ~= A.calendars_version then return { 'retry' } end
  for _, u in ipairs(A.updates) do
    local key = execute_key(u.id)
    local stamp = g(key, 'calendar_stamp')
    if stamp == '' then stamp = '0' end
    if g(key, 'state') ~= u.es or g(key, 'prev_fire_time') ~= u.ep or g(key, 'next_fire_time') ~= u.en
      or stamp ~= u.ek or (u.js ~= '' and g(k('job:' .. g(key, 'job_id')), 'state') ~= u.js) then
      return { 'retry' }
    end
  end
  if exists(key) then
    step_version(key)
  else
    redis.call('HSET', key, 'name', A.name, 'created_at', NOWS, 'version', '1')
  end
  redis.call('HSET', key, 'definition', A.definition, 'updated_at', NOWS)
  redis.call('SADD', k('calendars'), A.name)
  redis.call('INCR', k('calendars-version'))
  for _, u in ipairs(A.updates) do
    local e = execute_key(u.id)
    put(e, 'next_fire_time', u.sn)
    redis.call('HSET', e, 'state', u.ss, 'updated_at', NOWS)
    redis.call('HINCRBY', e, 'calendar_stamp', 1)
    reindex_execute(u.id)
  end
  changed(A.change)
  return { 'ok' }
end

C.calendar_delete = function()
  if redis.call('SISMEMBER', k('calendars'), A.name) == 0 then return { 'unknown_calendar', A.name } end
  local refused = stale('calendar', k('calendar:' .. A.name))
  if refused then return refused end
  local users = { 'in_use' }
  local jobs = {}
  for _, e in ipairs(redis.call('SMEMBERS', k('calendared'))) do
    local key = execute_key(e)
    if g(key, 'calendar') == A.name then
      local name = g(k('job:' .. g(key, 'job_id')), 'name')
      if name ~= '' and not jobs[name] then
        jobs[name] = true
        users[#users + 1] = 'job ' .. name
      end
    end
  end
  for _, other in ipairs(redis.call('SMEMBERS', k('calendars'))) do
    local ok, definition = pcall(cjson.decode, g(k('calendar:' .. other), 'definition'))
    if ok and type(definition) == 'table' and definition.base == A.name then
      users[#users + 1] = 'calendar ' .. other
    end
  end
  if #users > 1 then return users end
  redis.call('DEL', k('calendar:' .. A.name))
  redis.call('SREM', k('calendars'), A.name)
  redis.call('INCR', k('calendars-version'))
  changed(A.change)
  return { 'ok' }
end

-- ---- the scheduler ----

-- Standby on (A.on = '1', keeping the first pause's time) or off, recorded
-- as a change: since when it is on standby, or the empty string.
C.standby_set = function()
  if A.on == '1' then
    redis.call('HSETNX', k('meta'), 'paused_at', NOWS)
  else
    redis.call('HDEL', k('meta'), 'paused_at')
  end
  changed(A.change)
  return redis.call('HGET', k('meta'), 'paused_at') or ''
end

-- ---- backfill ----

-- Each fire time (A.fires: execute, fire_time, due) of job A.name queued
-- pending at its next attempt, unless an attempt of it ran or is under way
-- (the rule of quartz_core::store::backfill_attempt): { 'ok', then for
-- each fire in order its new row's id and attempt, or '' and '0' }.
C.job_backfill = function()
  local id, refused = job_as_read()
  if refused then return refused end
  local mine = k('job-executes:' .. id)
  for _, f in ipairs(A.fires) do
    if redis.call('SISMEMBER', mine, f.execute) == 0 then
      return { 'invalid', 'trigger ' .. f.execute .. ' is not one of job ' .. A.name .. '\'s' }
    end
  end
  local out, already, queued = { 'ok' }, 0, 0
  for _, f in ipairs(A.fires) do
    local attempt, ran = 1, false
    while true do
      local fid = redis.call('HGET', k('fire-keys'), unique_key(f.execute, id, f.fire_time, s(attempt)))
      if not fid then break end
      local state = g(fire_key(fid), 'state')
      if state ~= 'misfired' and state ~= 'skipped' then
        ran = true
        break
      end
      attempt = attempt + 1
    end
    if ran then
      already = already + 1
      out[#out + 1] = ''
      out[#out + 1] = '0'
    else
      local fire = insert_fire(f.execute, id, f.fire_time, s(attempt), '', '0', 'pending', '', '', '1', f.due)
      out[#out + 1] = fire
      out[#out + 1] = s(attempt)
      queued = queued + 1
    end
  end
  A.change.detail = #A.fires .. ' fire time(s)' .. A.span .. ': ' .. queued .. ' queued, ' .. already
    .. ' already in the ledger'
  A.change.target_id = id
  changed(A.change)
  return out
end

-- The store's library: one text, run either as a Redis function (loaded
-- once with FUNCTION LOAD, called with FCALL: Redis 7) or as a script
-- (EVALSHA, which runs the whole text again on every call: Redis 6, or a
-- server where FUNCTION LOAD is not allowed). Either way a call is `call`
-- below, whose first argument names the command. Every command is one
-- atomic step: the call is the transaction. Its one key is the scheduler's
-- key prefix (`quartz:{SCHEDULER}:`, one hash slot); its arguments are the
-- command, the command's arguments as a JSON object of strings (numbers as
-- decimal text; the empty string for none), and the scheduler's id base
-- (its number shifted past the id sequence). Times are the server's TIME
-- in milliseconds.
--
-- A record is a hash whose fields are the SQL backends' column names; a
-- field that is absent is NULL. Indexes:
--   jobs (name -> id), job-order (names, lex), job-executes:ID,
--   children:NAME (child job ids), parents (names with children);
--   due (waiting executes by next fire time), due-order (the same in the
--   poll's order, see order_member), due-unset (waiting, no next
--   fire time), running (running executes), complete (by last update),
--   calendared (executes naming a calendar);
--   fire-keys (execute:job:fire time:attempt -> fire id, the unique rule),
--   fires and job-fires:ID (by id), open and job-open:ID (claimed or
--   running), open-of:NODE:INCARNATION and open-owners (see owner_key),
--   pending (by due time), execute-pending:ID (an execute's pending fires
--   by fire time) and pending-executes (the executes with any), done:STATE
--   (finished, by fire time);
--   nodes, changes (the counter), change-log, calendars, meta.

-- A call's state, set by `call` before its command runs (a function's
-- library stays loaded between calls: nothing else here changes after
-- the library is loaded): the key prefix, the command's arguments, the id
-- base, and the server's time.
local P, A, BASE, NOW, NOWS
-- The commands, by name.
local C = {}

local function k(rest) return P .. rest end
local function s(n) return string.format('%d', n) end

-- A field, '' for NULL.
local function g(key, field) return redis.call('HGET', key, field) or '' end
-- Writes a field, or removes it for NULL.
local function put(key, field, value)
  if value == nil or value == '' then redis.call('HDEL', key, field) else redis.call('HSET', key, field, value) end
end
-- Writes a field of a new record when it has a value (nothing to remove).
local function set_if(key, field, value)
  if value ~= nil and value ~= '' then redis.call('HSET', key, field, value) end
end
-- Adds a field and its value to a write (field, value, ...) when it has one.
local function add_if(w, field, value)
  if value ~= nil and value ~= '' then
    w[#w + 1] = field
    w[#w + 1] = value
  end
end
local function flat(key) return redis.call('HGETALL', key) end
-- Reads `names` of a hash with one command: a table of field to value, ''
-- for NULL. A script's cost is mostly its commands, not what they do: a
-- claim, a start or an end reads its record once.
local function fields(key, names)
  local values = redis.call('HMGET', key, unpack(names))
  local out = {}
  for i, name in ipairs(names) do out[name] = values[i] or '' end
  return out
end
-- Writes `w` (field, value, ...) to a hash with at most two commands: a
-- value sets its field, '' removes it. A field that `had` (as `fields`
-- read it) shows unset already is not removed again.
local function write(key, w, had)
  local set, del = {}, {}
  for i = 1, #w, 2 do
    local field, value = w[i], w[i + 1]
    if value == '' then
      if not had or had[field] ~= '' then del[#del + 1] = field end
    else
      set[#set + 1] = field
      set[#set + 1] = value
    end
  end
  if #set > 0 then redis.call('HSET', key, unpack(set)) end
  if #del > 0 then redis.call('HDEL', key, unpack(del)) end
end
local function exists(key) return redis.call('EXISTS', key) == 1 end
local function new_id(kind) return s(BASE + redis.call('HINCRBY', k('ids'), kind, 1)) end
local function by_number(a, b) return tonumber(a) < tonumber(b) end

-- Whether a node's incarnation is live.
local function live(node, inc)
  if node == '' then return false end
  local n = redis.call('HMGET', k('node:' .. node), 'state', 'incarnation')
  return n[1] == 'live' and n[2] == inc
end

-- ---- executes ----

local function execute_key(id) return k('execute:' .. id) end

-- The poll's order (`due-order`): the waiting executes with a next fire
-- time, scored by it, each member its priority (flipped into 0..2^32-1,
-- highest first) and id in fixed-width decimals, so that members of one
-- score sort as the poll reads them and a page begins where the last one
-- ended. An execute's member is fixed for its life (its priority is set
-- when it is inserted), so a claim moves it by its score alone.
local function order_member(prio, id)
  return string.format('%010d:%016d', 2147483647 - prio, id)
end
local function order_member_of(id)
  return order_member(tonumber(g(execute_key(id), 'priority')) or 0, tonumber(id))
end

-- Puts an execute in the indexes its state and next fire time call for.
local function reindex_execute(id)
  local key = execute_key(id)
  local state, nxt = g(key, 'state'), g(key, 'next_fire_time')
  if state == 'waiting' and nxt ~= '' then
    redis.call('ZADD', k('due'), nxt, id)
    redis.call('ZADD', k('due-order'), nxt, order_member_of(id))
  else
    redis.call('ZREM', k('due'), id)
    redis.call('ZREM', k('due-order'), order_member_of(id))
  end
  if state == 'waiting' and nxt == '' then
    redis.call('SADD', k('due-unset'), id)
  else
    redis.call('SREM', k('due-unset'), id)
  end
  if state == 'running' then redis.call('SADD', k('running'), id) else redis.call('SREM', k('running'), id) end
  if state == 'complete' then
    redis.call('ZADD', k('complete'), tonumber(g(key, 'updated_at')) or NOW, id)
  else
    redis.call('ZREM', k('complete'), id)
  end
end

local function delete_execute(id)
  local key = execute_key(id)
  local job = g(key, 'job_id')
  for _, index in ipairs({ 'due', 'complete' }) do redis.call('ZREM', k(index), id) end
  redis.call('ZREM', k('due-order'), order_member_of(id))
  for _, index in ipairs({ 'due-unset', 'running', 'calendared', 'job-executes:' .. job }) do
    redis.call('SREM', k(index), id)
  end
  redis.call('DEL', key)
end

-- What a compare-and-set on an execute reads of it, with one command.
local CAS_READ = { 'state', 'prev_fire_time', 'next_fire_time', 'calendar_stamp', 'node_id', 'incarnation', 'priority',
  'job_id' }
local function cas_read(id) return fields(execute_key(id), CAS_READ) end

-- The compare-and-set on an execute (see ExecuteCas): expects state (es),
-- prev (ep), next (en), calendar stamp (ek) and, with eo, the owner (eon,
-- eoi); sets state (ss), prev (sp), next (sn), count (st), owner (son,
-- soi), the signature (sig) and, with rs, start and repeat limit. `cur`
-- is the execute as `cas_read` read it in this script, when it was.
-- Returns what it read of the execute when it won, else false.
local function cas_execute(o, cur)
  cur = cur or cas_read(o.id)
  -- Every execute has a state: none means no execute.
  if cur.state == '' then return false end
  local stamp = cur.calendar_stamp
  if stamp == '' then stamp = '0' end
  if cur.state ~= o.es or cur.prev_fire_time ~= o.ep or cur.next_fire_time ~= o.en or stamp ~= o.ek then
    return false
  end
  if o.eo == '1' and (cur.node_id ~= o.eon or cur.incarnation ~= o.eoi) then return false end
  local key = execute_key(o.id)
  local w = { 'prev_fire_time', o.sp, 'next_fire_time', o.sn, 'node_id', o.son, 'incarnation', o.soi,
    'times_triggered', o.st, 'state', o.ss, 'updated_at', NOWS }
  add_if(w, 'schedule_sig', o.sig)
  write(key, w, cur)
  if o.rs == '1' then
    redis.call('HSET', key, 'start_time', o.rstart)
    put(key, 'repeat_limit', o.rlimit)
  end
  if cur.state == 'waiting' and o.ss == 'waiting' and cur.next_fire_time ~= '' and o.sn ~= '' then
    -- Waiting before and after, with a next fire time: only its place in
    -- the due indexes moves.
    redis.call('ZADD', k('due'), o.sn, o.id)
    redis.call('ZADD', k('due-order'), o.sn, order_member(tonumber(cur.priority) or 0, tonumber(o.id)))
  else
    reindex_execute(o.id)
  end
  return cur
end

-- ---- fires ----

local function fire_key(id) return k('fire:' .. id) end
local OPEN = { claimed = true, running = true }
local CLAIMED = { claimed = true }
local RUNNING = { running = true }

-- A pending fire in its execute's index (`execute-pending:ID`, by fire
-- time), which `pending-executes` lists while it holds any, and the count
-- of fires those indexes hold (`meta`'s `pending-indexed`), which a lookup
-- compares with `pending` to tell that no older build wrote beside them.
local function index_pending(execute, id, fire_time)
  if redis.call('ZADD', k('execute-pending:' .. execute), fire_time, id) == 1 then
    redis.call('HINCRBY', k('meta'), 'pending-indexed', 1)
    redis.call('SADD', k('pending-executes'), execute)
  end
end

local function unindex_pending(execute, id)
  local key = k('execute-pending:' .. execute)
  if redis.call('ZREM', key, id) == 1 then
    redis.call('HINCRBY', k('meta'), 'pending-indexed', -1)
    if redis.call('ZCARD', key) == 0 then redis.call('SREM', k('pending-executes'), execute) end
  end
end

-- The open fires of a node's incarnation (`open-of:NODE:INCARNATION`), so
-- that the sweeps for a dead node's fires and for a node's own claims read
-- the fires they look for, not every open fire; `open-owners` lists the
-- incarnations (a node adds its own when it registers). An open fire in
-- none of the listed indexes (a released claim, or one written by a node of
-- an older build) is in `open` alone, where `open_candidates` finds it.
local function owner_key(owner) return k('open-of:' .. owner) end
local function owner_of(node, inc)
  if node == nil or node == '' then return nil end
  return node .. ':' .. inc
end
-- Adds an open fire to its owner's index, or takes it out (no owner: none).
local function own(owner, id) if owner then redis.call('SADD', owner_key(owner), id) end end
local function disown(owner, id) if owner then redis.call('SREM', owner_key(owner), id) end end

-- Moves a fire between the indexes of its old and new state; `node` and
-- `inc` name its owner while it is open.
local function index_fire(id, execute, job, old, new, fire_time, due, node, inc)
  -- Claimed to running: the same indexes.
  if old == new or (OPEN[old] and OPEN[new]) then return end
  local owner = owner_of(node, inc)
  if old ~= '' then
    if OPEN[old] then
      redis.call('SREM', k('open'), id)
      redis.call('SREM', k('job-open:' .. job), id)
      disown(owner, id)
    elseif old == 'pending' then
      redis.call('ZREM', k('pending'), id)
      unindex_pending(execute, id)
    else
      redis.call('ZREM', k('done:' .. old), id)
    end
  end
  if OPEN[new] then
    redis.call('SADD', k('open'), id)
    redis.call('SADD', k('job-open:' .. job), id)
    own(owner, id)
  elseif new == 'pending' then
    redis.call('ZADD', k('pending'), due, id)
    index_pending(execute, id, fire_time)
  else
    redis.call('ZADD', k('done:' .. new), fire_time, id)
  end
end

-- What a change of a fire's state reads of it, with one command.
local FIRE_READ = { 'state', 'execute_id', 'job_id', 'fire_time', 'due_at', 'node_id', 'incarnation', 'error' }
local function fire_read(f) return fields(f, FIRE_READ) end

-- Sets a fire's state and moves it between indexes; `row` is the fire as
-- `fire_read` read it in this script, when it was (its owner then is the
-- one the open fire's index names). `also` holds more fields to set with
-- the state (field, value, ...).
local function set_fire_state(id, f, new, row, also)
  row = row or fire_read(f)
  local w = { 'state', new }
  for _, v in ipairs(also or {}) do w[#w + 1] = v end
  redis.call('HSET', f, unpack(w))
  -- The execute names an index only of pending fires: a start or an end
  -- of a claimed fire does not read it.
  local execute = (row.state == 'pending' or new == 'pending') and row.execute_id or ''
  index_fire(id, execute, row.job_id, row.state, new, row.fire_time, row.due_at, row.node_id, row.incarnation)
end

local function unique_key(execute, job, fire_time, attempt)
  return execute .. ':' .. job .. ':' .. fire_time .. ':' .. attempt
end

-- Whether any attempt of enqueued work `w` (its fires are execute '-w')
-- is not ended, and its first fire's time.
local function work_open(w)
  local wk = k('work:' .. w)
  local job, ft = g(wk, 'job_id'), g(wk, 'fire_time')
  local attempt = 1
  while true do
    local id = redis.call('HGET', k('fire-keys'), unique_key('-' .. w, job, ft, s(attempt)))
    if not id then return false, ft end
    if g(fire_key(id), 'finished_at') == '' then return true, ft end
    attempt = attempt + 1
  end
end

-- Inserts a ledger row; nil when the unique rule says it exists already.
local function insert_fire(execute, job, fire_time, attempt, node, inc, state, err, skipped_until, count, due)
  -- The unique rule, taken with the row's id in one command: a row that
  -- exists already leaves the id unused, as a sequence does.
  local id = new_id('fire')
  if redis.call('HSETNX', k('fire-keys'), unique_key(execute, job, fire_time, attempt), id) == 0 then return nil end
  local w = { 'id', id, 'execute_id', execute, 'job_id', job, 'fire_time', fire_time, 'attempt', attempt,
    'state', state, 'claimed_at', NOWS, 'fire_count', count, 'incarnation', (node ~= '' and inc) or '0' }
  add_if(w, 'node_id', node)
  add_if(w, 'error', err)
  add_if(w, 'skipped_until', skipped_until)
  add_if(w, 'due_at', due)
  if state ~= 'claimed' and state ~= 'running' and state ~= 'pending' then
    -- Written ended (a misfire's record, a paused child's skip): finished now.
    w[#w + 1] = 'finished_at'
    w[#w + 1] = NOWS
  end
  redis.call('HSET', fire_key(id), unpack(w))
  redis.call('ZADD', k('fires'), id, id)
  redis.call('ZADD', k('job-fires:' .. job), id, id)
  index_fire(id, execute, job, '', state, fire_time, due, node, inc)
  return id
end

-- Deletes a fire (key `f`, of `execute` and `job`): its hash, its unique
-- key, and its places in the id indexes; the caller takes it out of its
-- state's index.
local function delete_fire(id, f, execute, job)
  redis.call('HDEL', k('fire-keys'), unique_key(execute, job, g(f, 'fire_time'), g(f, 'attempt')))
  redis.call('ZREM', k('fires'), id)
  redis.call('ZREM', k('job-fires:' .. job), id)
  redis.call('DEL', f)
end

-- The fire's key and what `fire_read` reads of it, when it is in one of
-- `from` under the owner; else nil.
local function held_row(id, from, node, inc)
  local f = fire_key(id)
  local row = fire_read(f)
  if not from[row.state] or row.node_id ~= node or row.incarnation ~= inc then return nil end
  return f, row
end

-- The fire's key when it is in one of `from` under the owner; else nil.
local function held(id, from, node, inc)
  return (held_row(id, from, node, inc))
end

-- Records the end of a fire; `row` as in `set_fire_state`.
local function end_fire(id, f, state, err, row)
  row = row or fire_read(f)
  local also = { 'finished_at', NOWS }
  add_if(also, 'error', err)
  if (err == nil or err == '') and row.error ~= '' then redis.call('HDEL', f, 'error') end
  set_fire_state(id, f, state, row, also)
end

-- Whether a live node of an older build is registered: one that keeps
-- `pending` without the executes' indexes of it (a node of this build
-- registers with `pending_index`).
local function older_node_live()
  for _, node in ipairs(redis.call('SMEMBERS', k('nodes'))) do
    local key = k('node:' .. node)
    if g(key, 'state') == 'live' and g(key, 'pending_index') == '' then return true end
  end
  return false
end

-- The executes' indexes of pending fires made again from `pending`.
local function reindex_pending()
  for _, execute in ipairs(redis.call('SMEMBERS', k('pending-executes'))) do
    redis.call('DEL', k('execute-pending:' .. execute))
  end
  redis.call('DEL', k('pending-executes'))
  local all = redis.call('ZRANGE', k('pending'), 0, -1)
  for _, p in ipairs(all) do
    local f = fire_key(p)
    local execute = g(f, 'execute_id')
    redis.call('ZADD', k('execute-pending:' .. execute), g(f, 'fire_time'), p)
    redis.call('SADD', k('pending-executes'), execute)
  end
  redis.call('HSET', k('meta'), 'pending-indexed', #all)
end

-- The pending fires of an execute whose fire time is before `before` (all
-- of them without it), by fire time: from the execute's own index, which
-- costs what the execute has pending, not what the scheduler has. Beside a
-- live node of an older build, which writes `pending` alone, they are read
-- from `pending`; when the indexes hold another count of fires than
-- `pending` (written by such a node, or before the indexes existed), they
-- are made again first.
local function pending_of(execute, before)
  local bound = (before and '(' .. before) or '+inf'
  if older_node_live() then
    local out = {}
    for _, p in ipairs(redis.call('ZRANGE', k('pending'), 0, -1)) do
      local f = fire_key(p)
      if g(f, 'execute_id') == execute and (not before or tonumber(g(f, 'fire_time')) < tonumber(before)) then
        out[#out + 1] = p
      end
    end
    table.sort(out, function(a, b)
      local ta, tb = tonumber(g(fire_key(a), 'fire_time')), tonumber(g(fire_key(b), 'fire_time'))
      return ta < tb or (ta == tb and tonumber(a) < tonumber(b))
    end)
    return out
  end
  local indexed = tonumber(redis.call('HGET', k('meta'), 'pending-indexed')) or 0
  if indexed ~= redis.call('ZCARD', k('pending')) then reindex_pending() end
  return redis.call('ZRANGEBYSCORE', k('execute-pending:' .. execute), '-inf', bound)
end

-- The next attempt of a fire as a pending row, due `due`; nil when it
-- exists (or, with one_per_execute, when a pending fire of the same execute
-- and job does).
local function next_pending(f, due, one_per_execute)
  local execute, job = g(f, 'execute_id'), g(f, 'job_id')
  if one_per_execute then
    for _, p in ipairs(pending_of(execute)) do
      if g(fire_key(p), 'job_id') == job then return nil end
    end
  end
  local attempt = s(tonumber(g(f, 'attempt')) + 1)
  local id = insert_fire(execute, job, g(f, 'fire_time'), attempt, '', '0', 'pending', '', '', '1', s(due))
  if id then return { id, s(due) } end
  return nil
end

-- The claimed and running fires of a concurrency key's jobs.
local function key_open(key)
  local n = 0
  for _, job in ipairs(redis.call('SMEMBERS', k('limit-jobs:' .. key))) do
    n = n + redis.call('SCARD', k('job-open:' .. job))
  end
  return n
end

-- The job's concurrency key, its open fires and limit, when they are full;
-- else nil.
local function key_full(job)
  local jk = k('job:' .. job)
  local key = g(jk, 'limit_key')
  if key == '' then return nil end
  local n, max = key_open(key), tonumber(g(jk, 'concurrency_limit')) or 0
  if n >= max then return { key, n, max } end
  return nil
end

-- ---- changes ----

-- Bumps the change counter and writes the change log's row.
local function changed(c)
  redis.call('INCR', k('changes'))
  local id = s(redis.call('HINCRBY', k('ids'), 'change', 1))
  redis.call('HSET', k('change:' .. id), 'id', id, 'at', NOWS, 'actor', c.actor, 'action', c.action,
    'target', c.target, 'detail', c.detail)
  if c.target_id then redis.call('HSET', k('change:' .. id), 'target_id', c.target_id) end
  redis.call('ZADD', k('change-log'), id, id)
end

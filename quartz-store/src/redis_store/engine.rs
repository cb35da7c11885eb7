//! [`EngineStore`] on Redis: membership, the poll's reads, claims and the
//! fire lifecycle, each one script. Calls that name fires or executes by id
//! alone find their scheduler by the number the ids carry; ids of several
//! schedulers in one call are split by scheduler.

use std::collections::BTreeMap;

use async_trait::async_trait;
use quartz_core::Timestamp;
use quartz_core::store::{
    ChainedFire, Claim, DueBatch, DueCursor, ExecuteCas, FireEnd, FireRecord, FireState, FireStore, FollowUp,
    HandlerSpan, Node, NodeRef, NodeRegistration, NodeStore, Outcome, PendingClaim, RejectedRow, ScheduleStore,
    SkippedRecord, Store, StoreError, check_name,
};
use redis::FromRedisValue;
use serde_json::{Value, json};

use super::RedisStore;
use super::decode::{self, Rejected};
use super::registry::number_of_id;
use super::script::{Record, cas_fields, flag, num, opt};
use crate::common::truncate;
use crate::ends::EndParts;

/// How often a node reads the change counter (Redis sends no notification
/// the store listens to).
pub(super) const CHANGE_POLL: std::time::Duration = std::time::Duration::from_millis(50);

/// The most rows one script of the poll's read returns.
const DUE_PAGE: usize = 500;

/// Where a due execute's raw record stands in the poll's order (next fire
/// time, priority, id); none when it has no next fire time.
fn order_of(record: &Record) -> Option<(i64, i32, i64)> {
    let next = record.get("next_fire_time")?.parse().ok()?;
    let priority = record.get("priority").and_then(|p| p.parse().ok()).unwrap_or(0);
    Some((next, priority, record.get("id")?.parse().ok()?))
}

fn owner(node: &NodeRef) -> (Value, Value) {
    (Value::String(node.node_id.clone()), num(node.incarnation))
}

/// The arguments of a step on an orphaned fire: the fire, the owner it must
/// still have (none when it was released) and, for a take-over or re-run,
/// the node taking it.
fn orphan_args(fire: &FireRecord, node: Option<&NodeRef>) -> Value {
    let mut args = json!({
        "id": num(fire.id),
        "onode": fire.owner.as_ref().map(|o| o.node_id.clone()).unwrap_or_default(),
        "oinc": num(fire.owner.as_ref().map_or(0, |o| o.incarnation)),
    });
    if let Some(node) = node {
        let (node_id, inc) = owner(node);
        args["node"] = node_id;
        args["inc"] = inc;
    }
    args
}

/// The open fires membership and recovery read (orphaned, claimed by a
/// node, pending), row by row ([`decode_each`](crate::common::decode_each)).
fn fires(records: &[Record]) -> Result<Vec<FireRecord>, StoreError> {
    Ok(crate::common::decode_each(records, "fire", decode::fire))
}

impl RedisStore {
    /// Runs `command` once per scheduler among `items` (grouped by the
    /// number of each item's id), with `args` made from that scheduler's
    /// items; answers each item's result in the items' order, from the
    /// per-scheduler answers `split` turns into one result per item.
    async fn per_scheduler<I, T, R>(
        &self,
        items: &[I],
        id_of: impl Fn(&I) -> i64,
        command: &str,
        args: impl Fn(&[&I]) -> Value,
        split: impl Fn(&[&I], R) -> Vec<T>,
        missing: impl Fn() -> T,
    ) -> Result<Vec<T>, StoreError>
    where
        R: FromRedisValue,
    {
        let mut groups: BTreeMap<i64, Vec<usize>> = BTreeMap::new();
        for (i, item) in items.iter().enumerate() {
            groups.entry(number_of_id(id_of(item))).or_default().push(i);
        }
        let mut out: Vec<Option<T>> = items.iter().map(|_| None).collect();
        for positions in groups.values() {
            let group: Vec<&I> = positions.iter().map(|&i| &items[i]).collect();
            let answer: Option<R> = self.on_id(id_of(group[0]), command, &args(&group)).await?;
            let results = match answer {
                Some(answer) => split(&group, answer),
                None => group.iter().map(|_| missing()).collect(),
            };
            for (&i, result) in positions.iter().zip(results) {
                out[i] = Some(result);
            }
        }
        Ok(out.into_iter().map(|r| r.unwrap_or_else(&missing)).collect())
    }

    /// A fenced start or its confirmation, per scheduler.
    async fn starts(
        &self,
        fire_ids: &[i64],
        node: &NodeRef,
        confirm: bool,
    ) -> Result<Vec<(i64, Timestamp)>, StoreError> {
        let (node_id, inc) = owner(node);
        let started = self
            .per_scheduler(
                fire_ids,
                |id| *id,
                "start",
                |ids| json!({ "ids": ids.iter().map(|id| num(**id)).collect::<Vec<_>>(), "node": node_id, "inc": inc, "confirm": flag(confirm) }),
                |ids, flat: Vec<i64>| {
                    let started: BTreeMap<i64, i64> = flat.chunks(2).map(|p| (p[0], p[1])).collect();
                    ids.iter().map(|id| started.get(id).map(|at| (**id, Timestamp::from_millis(*at)))).collect()
                },
                || None,
            )
            .await?;
        Ok(started.into_iter().flatten().collect())
    }

    /// A single fenced transition of a fire: whether it was made.
    async fn transition(
        &self,
        mode: &str,
        fire_id: i64,
        node: &NodeRef,
        state: &str,
        text: &str,
    ) -> Result<bool, StoreError> {
        let (node_id, inc) = owner(node);
        let args = json!({ "mode": mode, "id": num(fire_id), "node": node_id, "inc": inc, "state": state, "text": truncate(text) });
        Ok(self.on_id::<i64>(fire_id, "transition", &args).await? == Some(1))
    }

    /// A command on one fire that answers 1 when it was made.
    async fn fire_step(&self, fire_id: i64, command: &str, args: Value) -> Result<bool, StoreError> {
        Ok(self.on_id::<i64>(fire_id, command, &args).await? == Some(1))
    }

    /// An attempt's end with its follow-up.
    async fn follow_up(&self, fire_id: i64, command: &str, args: Value) -> Result<FollowUp, StoreError> {
        let reply: Option<Vec<String>> = self.on_id(fire_id, command, &args).await?;
        let reply = reply.unwrap_or_default();
        Ok(match reply.first().map(String::as_str) {
            Some("pending") => {
                let number = |i: usize| reply.get(i).and_then(|v| v.parse::<i64>().ok()).unwrap_or(0);
                FollowUp::Pending {
                    fire_id: number(1),
                    due_at: Timestamp::from_millis(number(2)),
                }
            }
            Some("recorded") => FollowUp::Recorded,
            _ => FollowUp::NotOwned,
        })
    }

    /// Decodes executes; marks the ones that cannot be decoded as errors.
    async fn serve(&self, scheduler: &str, records: Vec<Record>) -> Result<DueBatch, StoreError> {
        let calendars = self.calendars_for(scheduler, &records).await?;
        let mut batch = DueBatch::default();
        for record in &records {
            match decode::execute(record, scheduler, &calendars) {
                Ok(execute) => batch.executes.push(execute),
                Err(Rejected { id, reason }) => {
                    tracing::warn!(execute_id = id, %reason, "execute record cannot be understood; marked as an error");
                    let args = json!({ "id": num(id), "reason": truncate(&reason) });
                    self.write::<i64>(scheduler, "mark_error", &args).await?;
                    batch.rejected.push(RejectedRow { execute_id: id, reason });
                }
            }
        }
        Ok(batch)
    }

    async fn node_step(
        &self,
        scheduler: &str,
        command: &str,
        node: &NodeRef,
        extra: Value,
    ) -> Result<bool, StoreError> {
        let (node_id, inc) = owner(node);
        let mut args = json!({ "node": node_id, "inc": inc });
        if let (Value::Object(args), Value::Object(extra)) = (&mut args, extra) {
            args.extend(extra);
        }
        Ok(self.write::<i64>(scheduler, command, &args).await? == 1)
    }
}

#[async_trait]
impl NodeStore for RedisStore {
    async fn register_node(&self, node: &NodeRegistration) -> Result<Node, StoreError> {
        check_name("scheduler name", &self.scheduler)?;
        check_name("node id", &node.node_id)?;
        self.keys(&self.scheduler)?;
        let handlers = serde_json::to_string(&node.handlers).map_err(|e| StoreError::Database {
            reason: format!("handler names cannot be encoded: {e}"),
        })?;
        let args = json!({
            "node": node.node_id,
            "host": node.host,
            "pid": num(node.pid),
            "weight": num(node.weight.max(1)),
            "handlers": handlers,
            "dead_after": opt(node.dead_after.map(quartz_core::store::millis_of)),
            "schemas": if node.payload_schemas.is_empty() {
                String::new()
            } else {
                serde_json::to_string(&node.payload_schemas).map_err(|e| StoreError::Database {
                    reason: format!("payload schemas cannot be encoded: {e}"),
                })?
            },
        });
        let record: Record = self.write(&self.scheduler, "register", &args).await?;
        decode::node(&record, &self.scheduler)
    }

    async fn heartbeat(&self, node: &NodeRef, busy: u64) -> Result<bool, StoreError> {
        let scheduler = self.scheduler();
        self.node_step(scheduler, "heartbeat", node, json!({ "busy": num(busy) }))
            .await
    }

    async fn retire_node(&self, node: &NodeRef, dead_after_ms: i64) -> Result<bool, StoreError> {
        let scheduler = self.scheduler();
        self.node_step(scheduler, "retire", node, json!({ "dead_after": num(dead_after_ms) }))
            .await
    }

    async fn leave(&self, node: &NodeRef) -> Result<bool, StoreError> {
        let scheduler = self.scheduler();
        self.node_step(scheduler, "leave", node, json!({})).await
    }
}

#[async_trait]
impl ScheduleStore for RedisStore {
    async fn due_executes(
        &self,
        before: Timestamp,
        after: Option<DueCursor>,
        limit: u32,
    ) -> Result<DueBatch, StoreError> {
        let scheduler = self.scheduler();
        // Scripts of at most DUE_PAGE rows each: a script holds the server
        // for its whole run, and each one begins where the last ended.
        let mut records: Vec<Record> = Vec::new();
        let mut after = after.map(|c| (c.next_fire_time.as_millis(), c.priority, c.execute_id));
        loop {
            let want = (limit as usize - records.len()).min(DUE_PAGE);
            let args = json!({
                "before": num(before.as_millis()),
                "limit": num(want),
                "after_time": opt(after.map(|c| c.0)),
                "after_priority": opt(after.map(|c| c.1)),
                "after_id": opt(after.map(|c| c.2)),
            });
            let page: Vec<Record> = self.run(scheduler, 0, "due", &args).await?;
            let full = page.len() >= want;
            after = page.last().and_then(order_of);
            records.extend(page);
            if !full || records.len() >= limit as usize || after.is_none() {
                break;
            }
        }
        let mut batch = self.serve(scheduler, records).await?;
        // By next fire time, then priority, highest first, then id: the
        // script's page order.
        batch.executes.sort_by_key(|e| {
            (
                e.fire_state.next_fire_time.is_none(),
                e.fire_state.next_fire_time,
                -e.priority,
                e.id,
            )
        });
        Ok(batch)
    }

    async fn orphaned_executes(&self, limit: u32) -> Result<DueBatch, StoreError> {
        let scheduler = self.scheduler();
        let records: Vec<Record> = self
            .run(scheduler, 0, "orphaned_executes", &json!({ "limit": num(limit) }))
            .await?;
        self.serve(scheduler, records).await
    }

    async fn update_execute(&self, cas: &ExecuteCas, records: &[SkippedRecord]) -> Result<bool, StoreError> {
        let won = self.update_executes(&[(cas.clone(), records.to_vec())]).await?;
        Ok(won.first().copied().unwrap_or(false))
    }

    async fn update_executes(&self, updates: &[(ExecuteCas, Vec<SkippedRecord>)]) -> Result<Vec<bool>, StoreError> {
        let args = |group: &[&(ExecuteCas, Vec<SkippedRecord>)]| {
            let updates: Vec<Value> = group
                .iter()
                .map(|(cas, records)| {
                    let mut fields = cas_fields(cas);
                    let records: Vec<Value> = records
                        .iter()
                        .map(|r| {
                            json!({
                                "from": num(r.from.as_millis()),
                                "until": num(r.until.as_millis()),
                                "count": num(r.count),
                                "state": r.state.as_str(),
                                "reason": truncate(&r.reason),
                            })
                        })
                        .collect();
                    fields.insert("records".to_owned(), Value::Array(records));
                    Value::Object(fields)
                })
                .collect();
            json!({ "updates": updates })
        };
        self.per_scheduler(
            updates,
            |(cas, _)| cas.execute_id,
            "update",
            args,
            |_, won: Vec<i64>| won.into_iter().map(|w| w == 1).collect(),
            || false,
        )
        .await
    }

    async fn claim(&self, claim: &Claim) -> Result<Option<i64>, StoreError> {
        Ok(self.claim_batch(std::slice::from_ref(claim)).await?.pop().flatten())
    }

    async fn claim_batch(&self, claims: &[Claim]) -> Result<Vec<Option<i64>>, StoreError> {
        let args = |group: &[&Claim]| {
            let claims: Vec<Value> = group
                .iter()
                .map(|c| {
                    let mut fields = cas_fields(&c.cas);
                    let (node_id, inc) = owner(&c.node);
                    fields.insert("ft".to_owned(), num(c.fire_time.as_millis()));
                    fields.insert("at".to_owned(), num(c.attempt));
                    fields.insert("node".to_owned(), node_id);
                    fields.insert("inc".to_owned(), inc);
                    fields.insert("x".to_owned(), flag(c.exclusive));
                    fields.insert("ov".to_owned(), json!(c.overlap.map_or("", |o| o.as_str())));
                    Value::Object(fields)
                })
                .collect();
            json!({ "claims": claims })
        };
        self.per_scheduler(
            claims,
            |c| c.cas.execute_id,
            "claim",
            args,
            |_, won: Vec<i64>| won.into_iter().map(|id| (id != 0).then_some(id)).collect(),
            || None,
        )
        .await
    }

    async fn chain_parents(&self) -> Result<Vec<i64>, StoreError> {
        let scheduler = self.scheduler();
        self.run(scheduler, 0, "chain_parents", &json!({})).await
    }
}

#[async_trait]
impl FireStore for RedisStore {
    async fn mark_running_all(&self, fire_ids: &[i64], node: &NodeRef) -> Result<Vec<(i64, Timestamp)>, StoreError> {
        self.starts(fire_ids, node, false).await
    }

    async fn confirm_starts(&self, fire_ids: &[i64], node: &NodeRef) -> Result<Vec<(i64, Timestamp)>, StoreError> {
        self.starts(fire_ids, node, true).await
    }

    async fn end_fires(&self, node: &NodeRef, ends: &[(i64, FireEnd)]) -> Result<Vec<FollowUp>, StoreError> {
        crate::ends::end_fires(self, node, ends).await
    }

    async fn fire_time_out(&self, fire_id: i64, node: &NodeRef, error: &str) -> Result<bool, StoreError> {
        let (node_id, inc) = owner(node);
        let args = json!({ "id": num(fire_id), "node": node_id, "inc": inc, "text": truncate(error) });
        self.fire_step(fire_id, "time_out", args).await
    }

    async fn orphaned_fires(&self, limit: u32) -> Result<Vec<FireRecord>, StoreError> {
        let scheduler = self.scheduler();
        let records: Vec<Record> = self
            .run(scheduler, 0, "orphaned_fires", &json!({ "limit": num(limit) }))
            .await?;
        fires(&records)
    }

    async fn claimed_by(&self, node: &NodeRef, before: Timestamp, limit: u32) -> Result<Vec<FireRecord>, StoreError> {
        let scheduler = self.scheduler();
        let (node_id, inc) = owner(node);
        let args = json!({ "node": node_id, "inc": inc, "before": num(before.as_millis()), "limit": num(limit) });
        let records: Vec<Record> = self.run(scheduler, 0, "claimed_by", &args).await?;
        fires(&records)
    }

    async fn take_over(&self, fire: &FireRecord, node: &NodeRef) -> Result<bool, StoreError> {
        self.fire_step(fire.id, "take_over", orphan_args(fire, Some(node)))
            .await
    }

    async fn rerun(&self, fire: &FireRecord, node: &NodeRef) -> Result<Option<i64>, StoreError> {
        let id: Option<i64> = self.on_id(fire.id, "rerun", &orphan_args(fire, Some(node))).await?;
        Ok(id.filter(|id| *id != 0))
    }

    async fn abandon(&self, fire: &FireRecord) -> Result<bool, StoreError> {
        self.fire_step(fire.id, "abandon", orphan_args(fire, None)).await
    }

    async fn fires_pending(&self, before: Timestamp, limit: u32) -> Result<Vec<FireRecord>, StoreError> {
        let scheduler = self.scheduler();
        let args = json!({ "before": num(before.as_millis()), "limit": num(limit) });
        let records: Vec<Record> = self.run(scheduler, 0, "pending_due", &args).await?;
        fires(&records)
    }

    async fn pending_claim(&self, fire_id: i64, node: &NodeRef, exclusive: bool) -> Result<PendingClaim, StoreError> {
        let (node_id, inc) = owner(node);
        let args = json!({ "id": num(fire_id), "node": node_id, "inc": inc, "x": flag(exclusive) });
        let reply: Option<String> = self.on_id(fire_id, "pending_claim", &args).await?;
        Ok(match reply.as_deref() {
            Some("won") => PendingClaim::Won,
            Some("blocked") => PendingClaim::Blocked,
            _ => PendingClaim::Gone,
        })
    }

    async fn cancel_requests(&self, node: &NodeRef) -> Result<Vec<i64>, StoreError> {
        let scheduler = self.scheduler();
        let (node_id, inc) = owner(node);
        let args = json!({ "node": node_id, "inc": inc });
        self.run(scheduler, 0, "cancel_requests", &args).await
    }

    async fn work_run(&self, work_id: i64) -> Result<quartz_core::store::WorkRun, StoreError> {
        let scheduler = self.scheduler();
        let (payload, trace_parent): (String, String) = self
            .run(scheduler, 0, "work_run", &json!({ "id": num(work_id) }))
            .await?;
        Ok(quartz_core::store::WorkRun {
            payload: (!payload.is_empty()).then_some(payload),
            trace_parent: (!trace_parent.is_empty()).then_some(trace_parent),
        })
    }
}

#[async_trait]
impl EndParts for RedisStore {
    async fn succeed_all(&self, fires: &[(i64, Option<HandlerSpan>)], node: &NodeRef) -> Result<Vec<i64>, StoreError> {
        let (node_id, inc) = owner(node);
        let done = self
            .per_scheduler(
                fires,
                |(id, _)| *id,
                "succeed_all",
                |fires| {
                    json!({
                        "ids": fires.iter().map(|(id, _)| num(*id)).collect::<Vec<_>>(),
                        "spans": fires.iter().map(|(_, ran)| span(*ran)).collect::<Vec<_>>(),
                        "node": node_id,
                        "inc": inc,
                    })
                },
                |fires, recorded: Vec<i64>| {
                    fires
                        .iter()
                        .map(|(id, _)| recorded.contains(id).then_some(*id))
                        .collect()
                },
                || None,
            )
            .await?;
        Ok(done.into_iter().flatten().collect())
    }

    async fn finish(
        &self,
        fire_id: i64,
        node: &NodeRef,
        outcome: &Outcome,
        ran: Option<HandlerSpan>,
    ) -> Result<bool, StoreError> {
        let (state, error) = match outcome {
            Outcome::Succeeded => (FireState::Succeeded, ""),
            Outcome::Failed { error } => (FireState::Failed, error.as_str()),
        };
        let (node_id, inc) = owner(node);
        let args = json!({ "mode": "finish", "id": num(fire_id), "node": node_id, "inc": inc,
            "state": state.as_str(), "text": truncate(error), "ran": span(ran) });
        Ok(self.on_id::<i64>(fire_id, "transition", &args).await? == Some(1))
    }

    async fn succeed_and_chain(
        &self,
        fire_id: i64,
        node: &NodeRef,
        ran: Option<HandlerSpan>,
    ) -> Result<Option<Vec<ChainedFire>>, StoreError> {
        let (node_id, inc) = owner(node);
        let args = json!({ "id": num(fire_id), "node": node_id, "inc": inc, "ran": span(ran) });
        let reply: Option<Vec<i64>> = self.on_id(fire_id, "succeed_chain", &args).await?;
        match reply.as_deref() {
            Some([1, rest @ ..]) => Ok(Some(
                rest.chunks_exact(3)
                    .map(|p| ChainedFire {
                        fire_id: p[0],
                        job_id: p[1],
                        waits_from: (p[2] != 0).then(|| Timestamp::from_millis(p[2])),
                    })
                    .collect(),
            )),
            _ => Ok(None),
        }
    }

    async fn misfire_claimed(&self, fire_id: i64, node: &NodeRef, reason: &str) -> Result<bool, StoreError> {
        self.transition("misfire", fire_id, node, "", reason).await
    }

    async fn skip_claimed(&self, fire_id: i64, node: &NodeRef, reason: &str) -> Result<bool, StoreError> {
        self.transition("skip", fire_id, node, "", reason).await
    }

    async fn fail_claimed(&self, fire_id: i64, node: &NodeRef, reason: &str) -> Result<bool, StoreError> {
        self.transition("fail_claimed", fire_id, node, "", reason).await
    }

    async fn release_fire(&self, fire_id: i64, node: &NodeRef) -> Result<bool, StoreError> {
        let (node_id, inc) = owner(node);
        self.fire_step(
            fire_id,
            "release",
            json!({ "id": num(fire_id), "node": node_id, "inc": inc }),
        )
        .await
    }

    async fn fire_fail_and_retry(
        &self,
        fire_id: i64,
        node: &NodeRef,
        error: &str,
        retry_in_ms: i64,
        ran: Option<HandlerSpan>,
    ) -> Result<FollowUp, StoreError> {
        let (node_id, inc) = owner(node);
        let args = json!({ "id": num(fire_id), "node": node_id, "inc": inc, "text": truncate(error),
            "delay": num(retry_in_ms), "ran": span(ran) });
        self.follow_up(fire_id, "fail_retry", args).await
    }

    async fn fire_misfire_and_run_late(
        &self,
        fire_id: i64,
        node: &NodeRef,
        reason: &str,
        one_per_execute: bool,
    ) -> Result<FollowUp, StoreError> {
        let (node_id, inc) = owner(node);
        let args = json!({ "id": num(fire_id), "node": node_id, "inc": inc, "text": truncate(reason), "one": flag(one_per_execute) });
        self.follow_up(fire_id, "misfire_late", args).await
    }
}

/// A handler's run as a script reads it: `[start, finish]`, or `[]` when
/// not known (the start the fenced start recorded stays, finished now).
fn span(ran: Option<HandlerSpan>) -> Value {
    match ran {
        Some(r) => json!([num(r.started_at.as_millis()), num(r.finished_at.as_millis())]),
        None => json!([]),
    }
}

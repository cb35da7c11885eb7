//! A finished fire retried by hand: a new attempt, pending, written with
//! its change-log row in one transaction.

use super::convert::Statement as _;
use quartz_core::store::{ChangeAction, FireRetry, FireState, StoreError};
use sqlx::Row;

use super::changes::Change;
use super::{SqlStore, db_error};

impl SqlStore {
    pub(super) async fn fire_retry_by_hand(&self, scheduler: &str, fire_id: i64) -> Result<FireRetry, StoreError> {
        let mut tx = self.begin_change(scheduler).await?;
        let Some(fire) = self
            .query(
                "SELECT execute_id, job_id, fire_time, attempt, state FROM quartz_fire WHERE id = ? AND scheduler = ?",
            )
            .bind(fire_id)
            .bind(scheduler.to_owned())
            .row(&mut *tx)
            .await?
        else {
            return Ok(FireRetry::NotFound);
        };
        let (execute_id, job_id, fire_time, attempt): (i64, i64, i64, i64) = (
            fire.try_get(0).map_err(db_error)?,
            fire.try_get(1).map_err(db_error)?,
            fire.try_get(2).map_err(db_error)?,
            fire.try_get(3).map_err(db_error)?,
        );
        let state: String = fire.try_get(4).map_err(db_error)?;
        if let Some(refused) = crate::common::unretryable(fire_id, &state) {
            return Ok(FireRetry::Refused(refused));
        }
        let job = self
            .query("SELECT name, state FROM quartz_job WHERE id = ?")
            .bind(job_id)
            .row(&mut *tx)
            .await?;
        let Some(job) = job else {
            return Ok(FireRetry::Refused("its job was deleted".to_owned()));
        };
        let name: String = job.try_get(0).map_err(db_error)?;
        if job.try_get::<String, _>(1).map_err(db_error)? == "paused" {
            return Ok(FireRetry::Refused(format!(
                "job {name:?} is paused: resume it first, or fire it now"
            )));
        }
        // The attempts from this one on: none open, none succeeded since.
        let later = self
            .query(
                "SELECT id, attempt, state FROM quartz_fire WHERE execute_id = ? AND job_id = ? AND fire_time = ? \
                 AND attempt >= ? ORDER BY attempt",
            )
            .bind(execute_id)
            .bind(job_id)
            .bind(fire_time)
            .bind(attempt)
            .rows(&mut *tx)
            .await?;
        let mut last = attempt;
        for row in &later {
            let (id, a, state): (i64, i64, String) = (
                row.try_get(0).map_err(db_error)?,
                row.try_get(1).map_err(db_error)?,
                row.try_get(2).map_err(db_error)?,
            );
            if let Some(refused) = crate::common::blocks_retry(id, &state) {
                return Ok(FireRetry::Refused(refused));
            }
            last = last.max(a);
        }
        let next = last + 1;
        let now = self.now_in(&mut tx).await?.as_millis();
        let new_id = self
            .insert_pending_by_hand(&mut tx, scheduler, (execute_id, job_id, fire_time, next), now, || {
                format!("fire {fire_id} retried twice at once")
            })
            .await?;
        let detail = format!(
            "fire {fire_id} ({}): attempt {next} is fire {new_id}",
            FireState::parse(&state).map_or("?", FireState::as_str)
        );
        self.changed_in(
            &mut tx,
            scheduler,
            Change::new(ChangeAction::FireRetry, &name, detail).of_job(job_id),
        )
        .await?;
        tx.commit().await.map_err(db_error)?;
        Ok(FireRetry::Pending {
            fire_id: new_id,
            attempt: u32::try_from(next).unwrap_or(u32::MAX),
        })
    }
}

//! The job form's model: its fields as typed, read from a job's view or a
//! posted body, and turned into a definition or the patch of an edit.

use quartz_core::Timestamp;
use quartz_core::admin::{JobDefinition, JobPatch, JobView, TriggerDefinition, TriggerKind};

use crate::console::Fields;

/// The form's fields, as typed.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub(super) struct JobForm {
    pub(super) name: String,
    pub(super) handler: String,
    pub(super) description: String,
    pub(super) payload: String,
    pub(super) kind: String,
    pub(super) cron: String,
    pub(super) time_zone: String,
    pub(super) interval_ms: String,
    pub(super) start: String,
    pub(super) end: String,
    pub(super) repeat: String,
    pub(super) priority: String,
    pub(super) misfire: String,
    pub(super) calendar: String,
    pub(super) dst_skipped: String,
    pub(super) dst_repeated: String,
    pub(super) max_attempts: String,
    pub(super) backoff_ms: String,
    pub(super) backoff_max_ms: String,
    pub(super) timeout_ms: String,
    pub(super) allow_concurrent: bool,
    pub(super) requests_recovery: bool,
}

/// An error beside a field.
pub(super) type FieldErrors = Vec<(String, String)>;

fn opt(v: Option<i64>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

impl JobForm {
    pub(super) fn blank() -> JobForm {
        JobForm {
            payload: "null".into(),
            kind: "cron".into(),
            cron: "0 * * * * ?".into(),
            time_zone: "UTC".into(),
            misfire: "smart".into(),
            priority: "0".into(),
            dst_skipped: "quartz".into(),
            dst_repeated: "quartz".into(),
            max_attempts: "1".into(),
            backoff_ms: "0".into(),
            allow_concurrent: true,
            ..JobForm::default()
        }
    }

    pub(super) fn from_view(job: &JobView) -> JobForm {
        let mut form = JobForm {
            name: job.name.clone(),
            handler: job.handler.clone(),
            description: job.description.clone(),
            payload: serde_json::to_string_pretty(&job.payload).unwrap_or_default(),
            kind: "none".into(),
            misfire: "smart".into(),
            dst_skipped: "quartz".into(),
            dst_repeated: "quartz".into(),
            max_attempts: job.max_attempts.to_string(),
            backoff_ms: job.backoff_ms.to_string(),
            backoff_max_ms: opt(job.backoff_max_ms),
            timeout_ms: opt(job.timeout_ms),
            allow_concurrent: job.allow_concurrent,
            requests_recovery: job.requests_recovery,
            ..JobForm::default()
        };
        if let Some(t) = job.triggers.first() {
            form.kind.clone_from(&t.kind);
            form.cron = t.cron.clone().unwrap_or_default();
            form.time_zone = t.time_zone.clone().unwrap_or_default();
            form.interval_ms = opt(t.interval_ms);
            form.misfire.clone_from(&t.misfire);
            form.calendar = t.calendar.clone().unwrap_or_default();
            form.dst_skipped = t.dst_skipped.clone().unwrap_or_else(|| "quartz".into());
            form.dst_repeated = t.dst_repeated.clone().unwrap_or_else(|| "quartz".into());
            form.start = Timestamp::from_millis(t.start).to_string();
            form.end = t.end.map(|e| Timestamp::from_millis(e).to_string()).unwrap_or_default();
            form.repeat = t.repeat.map(|r| r.to_string()).unwrap_or_default();
            form.priority = t.priority.to_string();
        }
        form
    }

    /// The fields where `other` differs from this form, by name: each
    /// one's name and `other`'s value.
    pub(super) fn differences(&self, other: &JobForm) -> Vec<(String, String)> {
        let (mine, theirs) = (as_map(self), as_map(other));
        mine.iter()
            .filter(|(name, value)| theirs.get(*name) != Some(value))
            .map(|(name, _)| {
                let now = match theirs.get(name) {
                    Some(serde_json::Value::String(s)) => s.clone(),
                    Some(serde_json::Value::Bool(on)) => if *on { "on" } else { "off" }.to_owned(),
                    Some(other) => other.to_string(),
                    None => String::new(),
                };
                (name.clone(), now)
            })
            .collect()
    }

    /// An edit made from `base` carried over onto `now`, a later state of
    /// the job: each field this form changed from `base` keeps this form's
    /// value, every other takes `now`'s.
    pub(super) fn rebased(&self, base: &JobForm, now: &JobForm) -> JobForm {
        let (mine, base, mut merged) = (as_map(self), as_map(base), as_map(now));
        for (name, value) in mine {
            if base.get(&name) != Some(&value) {
                merged.insert(name, value);
            }
        }
        serde_json::from_value(serde_json::Value::Object(merged)).unwrap_or_else(|_| self.clone())
    }

    /// The form as posted over `base`: a field the body does not carry
    /// keeps `base`'s value (a client that posts only what it changes loses
    /// nothing), an empty one is cleared; checkboxes are on when present.
    pub(super) fn from_fields(f: &Fields, base: &JobForm) -> JobForm {
        let text = |name: &str, kept: &String| f.opt(name).map_or_else(|| kept.clone(), str::to_owned);
        JobForm {
            name: text("name", &base.name),
            handler: text("handler", &base.handler),
            description: text("description", &base.description),
            payload: text("payload", &base.payload),
            kind: text("kind", &base.kind),
            cron: text("cron", &base.cron),
            time_zone: text("time_zone", &base.time_zone),
            interval_ms: text("interval_ms", &base.interval_ms),
            start: text("start", &base.start),
            end: text("end", &base.end),
            repeat: text("repeat", &base.repeat),
            priority: text("priority", &base.priority),
            misfire: text("misfire", &base.misfire),
            calendar: text("calendar", &base.calendar),
            dst_skipped: text("dst_skipped", &base.dst_skipped),
            dst_repeated: text("dst_repeated", &base.dst_repeated),
            max_attempts: text("max_attempts", &base.max_attempts),
            backoff_ms: text("backoff_ms", &base.backoff_ms),
            backoff_max_ms: text("backoff_max_ms", &base.backoff_max_ms),
            timeout_ms: text("timeout_ms", &base.timeout_ms),
            allow_concurrent: f.on("allow_concurrent"),
            requests_recovery: f.on("requests_recovery"),
        }
    }

    /// What decides the fire times: an edit that leaves it alone keeps the
    /// trigger (and where it stands); an edit of any of it replaces the
    /// trigger with one built from every field the form shows, so that
    /// nothing the form did not change is lost.
    pub(super) fn schedule(&self) -> [&str; 12] {
        [
            self.kind.trim(),
            self.cron.trim(),
            self.time_zone.trim(),
            self.interval_ms.trim(),
            self.start.trim(),
            self.end.trim(),
            self.repeat.trim(),
            self.priority.trim(),
            self.misfire.trim(),
            self.calendar.trim(),
            dst_name(&self.dst_skipped),
            dst_name(&self.dst_repeated),
        ]
    }

    pub(super) fn trigger(&self, errors: &mut FieldErrors) -> Option<TriggerDefinition> {
        let kind = match self.kind.as_str() {
            "cron" => TriggerKind::Cron,
            "fixed_rate" => TriggerKind::FixedRate,
            "fixed_delay" => TriggerKind::FixedDelay,
            "once" => TriggerKind::Once,
            "none" => return None,
            other => {
                errors.push(("kind".into(), format!("{other:?} is not a kind of schedule")));
                return None;
            }
        };
        let text = |s: &str| Some(s.trim().to_owned()).filter(|s| !s.is_empty());
        let start = instant(errors, "start", &self.start);
        let end = instant(errors, "end", &self.end);
        let cron_kind = kind == TriggerKind::Cron;
        let interval_kind = matches!(kind, TriggerKind::FixedRate | TriggerKind::FixedDelay);
        Some(TriggerDefinition {
            kind,
            cron: text(&self.cron).filter(|_| cron_kind),
            time_zone: text(&self.time_zone).filter(|_| cron_kind),
            interval_ms: number(errors, "interval_ms", &self.interval_ms).filter(|_| interval_kind),
            start,
            end,
            repeat: number(errors, "repeat", &self.repeat),
            misfire: text(&self.misfire),
            priority: number(errors, "priority", &self.priority).unwrap_or(0),
            calendar: text(&self.calendar),
            dst_skipped: Some(dst_name(&self.dst_skipped).to_owned()).filter(|s| s != "quartz" && cron_kind),
            dst_repeated: Some(dst_name(&self.dst_repeated).to_owned()).filter(|s| s != "quartz" && cron_kind),
        })
    }

    pub(super) fn payload(&self, errors: &mut FieldErrors) -> serde_json::Value {
        if self.payload.trim().is_empty() {
            return serde_json::Value::Null;
        }
        serde_json::from_str(&self.payload).unwrap_or_else(|e| {
            errors.push(("payload".into(), format!("not JSON: {e}")));
            serde_json::Value::Null
        })
    }

    pub(super) fn definition(&self) -> Result<JobDefinition, FieldErrors> {
        let mut errors = Vec::new();
        let mut job = JobDefinition::new(self.name.trim(), self.handler.trim());
        job.description = self.description.clone();
        job.payload = self.payload(&mut errors);
        job.allow_concurrent = self.allow_concurrent;
        job.requests_recovery = self.requests_recovery;
        job.timeout_ms = number(&mut errors, "timeout_ms", &self.timeout_ms);
        job.max_attempts = number(&mut errors, "max_attempts", &self.max_attempts).unwrap_or(1);
        job.backoff_ms = number(&mut errors, "backoff_ms", &self.backoff_ms).unwrap_or(0);
        job.backoff_max_ms = number(&mut errors, "backoff_max_ms", &self.backoff_max_ms);
        job.triggers = self.trigger(&mut errors).into_iter().collect();
        if errors.is_empty() { Ok(job) } else { Err(errors) }
    }

    /// The change from `was` to this form; the schedule only when it changed
    /// and the job has at most one trigger.
    pub(super) fn patch(&self, was: &JobView) -> Result<JobPatch, FieldErrors> {
        let def = self.definition()?;
        let before = JobForm::from_view(was);
        let schedule_changed = was.triggers.len() <= 1 && self.schedule() != before.schedule();
        Ok(JobPatch {
            name: Some(def.name).filter(|n| *n != was.name),
            handler: Some(def.handler),
            payload: Some(def.payload),
            description: Some(def.description),
            requests_recovery: Some(def.requests_recovery),
            allow_concurrent: Some(def.allow_concurrent),
            timeout_ms: Some(def.timeout_ms.unwrap_or(0)),
            max_attempts: Some(def.max_attempts),
            backoff_ms: Some(def.backoff_ms),
            backoff_max_ms: Some(def.backoff_max_ms.unwrap_or(0)),
            parent: None,
            triggers: schedule_changed.then_some(def.triggers),
        })
    }
}

/// A form's fields by name.
fn as_map(form: &JobForm) -> serde_json::Map<String, serde_json::Value> {
    match serde_json::to_value(form) {
        Ok(serde_json::Value::Object(map)) => map,
        _ => serde_json::Map::new(),
    }
}

/// A DST choice as typed; empty is Quartz's.
pub(super) fn dst_name(text: &str) -> &str {
    match text.trim() {
        "" => "quartz",
        name => name,
    }
}

/// An RFC 3339 instant from a field, `None` when empty.
fn instant(errors: &mut FieldErrors, field: &str, text: &str) -> Option<i64> {
    match text.trim() {
        "" => None,
        s => chrono::DateTime::parse_from_rfc3339(s).map_or_else(
            |_| {
                errors.push((field.into(), "write an RFC 3339 instant: 2026-01-31T09:00:00Z".into()));
                None
            },
            |t| Some(t.timestamp_millis()),
        ),
    }
}

/// A whole number from a field, `None` when empty.
fn number<T: std::str::FromStr>(errors: &mut FieldErrors, field: &str, text: &str) -> Option<T> {
    match text.trim() {
        "" => None,
        t => t.parse().map_or_else(
            |_| {
                errors.push((field.into(), format!("{t:?} is not a whole number in range")));
                None
            },
            Some,
        ),
    }
}

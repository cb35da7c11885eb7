//! The job form's model: its fields as typed, read from a job's view or a
//! posted body, and turned into a definition or the patch of an edit.

use quartz_core::Timestamp;
use quartz_core::admin::{FieldError, JobDefinition, JobPatch, JobView};

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
    pub(super) jitter_ms: String,
    pub(super) catch_up_ms: String,
    pub(super) overlap: String,
    pub(super) max_attempts: String,
    pub(super) backoff_ms: String,
    pub(super) backoff_max_ms: String,
    pub(super) timeout_ms: String,
    pub(super) concurrency_limit: String,
    pub(super) concurrency_key: String,
    pub(super) allow_concurrent: bool,
    pub(super) requests_recovery: bool,
}

/// An error beside a field.
pub(super) type FieldErrors = Vec<(String, String)>;

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

    /// The form of a job as stored: each field read from the JSON form of
    /// its definition (the same names), its first trigger's fields beside
    /// the job's, instants as RFC 3339.
    pub(super) fn from_view(job: &JobView) -> JobForm {
        let definition = match serde_json::to_value(job.definition()) {
            Ok(serde_json::Value::Object(map)) => map,
            _ => serde_json::Map::new(),
        };
        let mut fields = JobForm::blank_of(&definition);
        fields.insert("kind".into(), "none".into());
        if let Some(serde_json::Value::Object(trigger)) = definition.get("triggers").and_then(|t| t.get(0)).cloned() {
            fields.extend(JobForm::blank_of(&trigger));
            for name in ["start", "end"] {
                if let Some(ms) = trigger.get(name).and_then(serde_json::Value::as_i64) {
                    fields.insert(name.into(), Timestamp::from_millis(ms).to_string().into());
                }
            }
        }
        if let Some(payload) = definition.get("payload") {
            fields.insert(
                "payload".into(),
                serde_json::to_string_pretty(payload).unwrap_or_default().into(),
            );
        }
        let mut form: JobForm = serde_json::from_value(serde_json::Value::Object(fields)).unwrap_or_default();
        for dst in [&mut form.dst_skipped, &mut form.dst_repeated] {
            if dst.is_empty() {
                "quartz".clone_into(dst);
            }
        }
        if form.misfire.is_empty() {
            "smart".clone_into(&mut form.misfire);
        }
        form
    }

    /// The form's text fields among a JSON form's values: strings as they
    /// are, numbers as digits, booleans kept; the rest left out.
    fn blank_of(json: &serde_json::Map<String, serde_json::Value>) -> serde_json::Map<String, serde_json::Value> {
        let names = as_map(&JobForm::default());
        json.iter()
            .filter(|(name, _)| names.contains_key(*name))
            .filter_map(|(name, value)| {
                let value = match value {
                    serde_json::Value::String(_) | serde_json::Value::Bool(_) => value.clone(),
                    serde_json::Value::Number(n) => n.to_string().into(),
                    _ => return None,
                };
                Some((name.clone(), value))
            })
            .collect()
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
            jitter_ms: text("jitter_ms", &base.jitter_ms),
            catch_up_ms: text("catch_up_ms", &base.catch_up_ms),
            overlap: text("overlap", &base.overlap),
            max_attempts: text("max_attempts", &base.max_attempts),
            backoff_ms: text("backoff_ms", &base.backoff_ms),
            backoff_max_ms: text("backoff_max_ms", &base.backoff_max_ms),
            timeout_ms: text("timeout_ms", &base.timeout_ms),
            concurrency_limit: text("concurrency_limit", &base.concurrency_limit),
            concurrency_key: text("concurrency_key", &base.concurrency_key),
            allow_concurrent: f.on("allow_concurrent"),
            requests_recovery: f.on("requests_recovery"),
        }
    }

    /// What decides the fire times: an edit that leaves it alone keeps the
    /// trigger (and where it stands); an edit of any of it replaces the
    /// trigger with one built from every field the form shows, so that
    /// nothing the form did not change is lost.
    pub(super) fn schedule(&self) -> [&str; 15] {
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
            self.jitter_ms.trim(),
            self.catch_up_ms.trim(),
            self.overlap.trim(),
        ]
    }

    /// The JSON form of the trigger the form shows, `None` for none: only
    /// the fields its kind has, empty ones left out.
    fn trigger_json(&self) -> Option<serde_json::Map<String, serde_json::Value>> {
        let kind = self.kind.trim();
        if kind == "none" {
            return None;
        }
        let cron_kind = kind == "cron";
        let interval_kind = matches!(kind, "fixed_rate" | "fixed_delay");
        let mut json = serde_json::Map::new();
        json.insert("kind".into(), kind.into());
        let mut text = |name: &str, value: &str, applies: bool| {
            if applies && !value.trim().is_empty() {
                json.insert(name.into(), wire_value(name, value.trim()));
            }
        };
        text("cron", &self.cron, cron_kind);
        text("time_zone", &self.time_zone, cron_kind);
        text("interval_ms", &self.interval_ms, interval_kind);
        text("start", &self.start, true);
        text("end", &self.end, true);
        text("repeat", &self.repeat, true);
        text("misfire", &self.misfire, true);
        text("priority", &self.priority, true);
        text("calendar", &self.calendar, true);
        text("jitter_ms", &self.jitter_ms, true);
        text("catch_up_ms", &self.catch_up_ms, true);
        text("overlap", &self.overlap, true);
        for (name, value) in [("dst_skipped", &self.dst_skipped), ("dst_repeated", &self.dst_repeated)] {
            text(name, dst_name(value), cron_kind && dst_name(value) != "quartz");
        }
        Some(json)
    }

    /// The definition the form describes, read from the JSON form its
    /// fields make, as the API reads a body: each error beside its field.
    pub(super) fn definition(&self) -> Result<JobDefinition, FieldErrors> {
        let mut json = serde_json::Map::new();
        let mut errors = Vec::new();
        for (name, value) in [("name", self.name.trim()), ("handler", self.handler.trim())] {
            json.insert(name.into(), value.into());
        }
        json.insert("description".into(), self.description.clone().into());
        if !self.payload.trim().is_empty() {
            match serde_json::from_str::<serde_json::Value>(&self.payload) {
                Ok(payload) => {
                    json.insert("payload".into(), payload);
                }
                Err(e) => errors.push(("payload".into(), format!("not JSON: {e}"))),
            }
        }
        json.insert("allow_concurrent".into(), self.allow_concurrent.into());
        json.insert("requests_recovery".into(), self.requests_recovery.into());
        for (name, value) in [
            ("timeout_ms", &self.timeout_ms),
            ("max_attempts", &self.max_attempts),
            ("backoff_ms", &self.backoff_ms),
            ("backoff_max_ms", &self.backoff_max_ms),
            ("concurrency_limit", &self.concurrency_limit),
            ("concurrency_key", &self.concurrency_key),
        ] {
            if !value.trim().is_empty() {
                json.insert(name.into(), wire_value(name, value.trim()));
            }
        }
        let triggers: Vec<serde_json::Value> = self.trigger_json().into_iter().map(Into::into).collect();
        json.insert("triggers".into(), triggers.into());
        // Read until every field at fault is known: each one refused is
        // noted beside its field, and the form read again without it.
        loop {
            match serde_path_to_error::deserialize(serde_json::Value::Object(json.clone())) {
                Ok(definition) if errors.is_empty() => return Ok(definition),
                Ok(_) => return Err(errors),
                Err(e) => {
                    let path = e.path().to_string();
                    let message = e.inner().to_string();
                    let (field, mut message) = match FieldError::parse(&message) {
                        Some((field, rest)) => (field.to_owned(), rest.to_owned()),
                        None => (path.rsplit('.').next().unwrap_or_default().to_owned(), message),
                    };
                    if let Some(text) = message
                        .strip_prefix("invalid type: string ")
                        .and_then(|rest| rest.split(", expected").next())
                    {
                        message = format!("{text} is not a whole number in range");
                    }
                    let removed = json.remove(&field).is_some()
                        || json
                            .get_mut("triggers")
                            .and_then(|t| t.get_mut(0))
                            .and_then(serde_json::Value::as_object_mut)
                            .is_some_and(|t| t.remove(&field).is_some());
                    let field = if field.is_empty() || field.starts_with("triggers") {
                        "kind".to_owned()
                    } else {
                        field
                    };
                    if !errors.iter().any(|(f, _)| *f == field) {
                        errors.push((field, message));
                    }
                    if !removed {
                        return Err(errors);
                    }
                }
            }
        }
    }

    /// The change from `was` to this form; the schedule only when it changed
    /// and the job has at most one trigger.
    pub(super) fn patch(&self, was: &JobView) -> Result<JobPatch, FieldErrors> {
        let JobDefinition { spec, triggers } = self.definition()?;
        let before = JobForm::from_view(was);
        let schedule_changed = was.triggers.len() <= 1 && self.schedule() != before.schedule();
        Ok(JobPatch {
            name: Some(spec.name).filter(|n| n != was.name()),
            handler: Some(spec.handler),
            payload: Some(serde_json::from_str(&spec.payload).unwrap_or(serde_json::Value::Null)),
            description: Some(spec.description),
            requests_recovery: Some(spec.requests_recovery),
            allow_concurrent: Some(spec.allow_concurrent),
            timeout: Some(spec.timeout),
            max_attempts: Some(spec.retry.max_attempts),
            backoff: Some(spec.retry.backoff),
            backoff_max: Some(spec.retry.backoff_max),
            parent: None,
            concurrency_limit: Some(spec.limit.as_ref().map(|l| l.max)),
            concurrency_key: spec.limit.map(|l| l.key),
            triggers: schedule_changed.then_some(triggers),
        })
    }
}

/// A field's text as its JSON form takes it: a number where the field is
/// one and the text is, otherwise the text (which the definition then
/// refuses, naming the field).
fn wire_value(name: &str, text: &str) -> serde_json::Value {
    const NUMBERS: [&str; 10] = [
        "concurrency_limit",
        "interval_ms",
        "jitter_ms",
        "catch_up_ms",
        "repeat",
        "priority",
        "timeout_ms",
        "max_attempts",
        "backoff_ms",
        "backoff_max_ms",
    ];
    if NUMBERS.contains(&name)
        && let Ok(n) = text.parse::<serde_json::Number>()
    {
        return serde_json::Value::Number(n);
    }
    text.into()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_at_fault_is_named() {
        let form = JobForm {
            name: "nightly".into(),
            handler: "report".into(),
            payload: "{not json".into(),
            max_attempts: "many".into(),
            interval_ms: "often".into(),
            kind: "fixed_rate".into(),
            ..JobForm::blank()
        };
        let errors = form.definition().unwrap_err();
        let fields: Vec<&str> = errors.iter().map(|(f, _)| f.as_str()).collect();
        assert_eq!(fields, ["payload", "max_attempts", "interval_ms"], "{errors:?}");
    }
}

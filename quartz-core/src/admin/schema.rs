//! Payloads checked against the JSON Schema their handler's nodes
//! published ([`TypedJob::payload_schema`](crate::engine::TypedJob::payload_schema),
//! [`SchedulerBuilder::payload_schema`](crate::engine::SchedulerBuilder::payload_schema)):
//! a job written or work enqueued through the admin surface with a payload
//! that does not fit is refused, naming the field, instead of failing every
//! fire. The check needs the `payload-schema` feature (the API, the console
//! and the `quartz` command have it); without it every JSON payload is
//! accepted, as when no node published a schema.

use serde_json::Value;

use super::{Admin, AdminError, views};
use crate::store::PayloadSchemas;

/// A handler's payload schema, as the admin surface shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PayloadSchemaView {
    /// The handler (a typed job's kind).
    pub handler: String,
    /// The live node whose schema it is: of those offering the handler,
    /// the one registered last that published one.
    pub node: String,
    /// The JSON Schema a payload of the handler must fit.
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub schema: Value,
}

/// Checks a schema a node is about to publish for a handler: a JSON Schema
/// (an object or a boolean; compiled, with the `payload-schema` feature),
/// of a handler the node registers. The reason, when it is not.
pub(crate) fn check_schema(schema: &Value, registered: bool) -> Result<(), String> {
    if !registered {
        return Err("has a payload schema but no handler of that name is registered".to_owned());
    }
    if !(schema.is_object() || schema.is_boolean()) {
        return Err(format!(
            "its payload schema is not a JSON Schema (an object or a boolean): {schema}"
        ));
    }
    #[cfg(feature = "payload-schema")]
    if let Err(e) = jsonschema::validator_for(schema) {
        return Err(format!("its payload schema is not a valid JSON Schema: {e}"));
    }
    Ok(())
}

/// The schema a payload of `handler` is checked against, and the node that
/// published it: of the live nodes that offer the handler, the one
/// registered last that published a schema for it (in a rolling deploy,
/// the newest code's). `None` when none did.
pub(crate) fn schema_for<'a>(
    handler: &str,
    nodes: &[crate::store::Node],
    published: &'a [(String, PayloadSchemas)],
    now: crate::Timestamp,
) -> Option<(&'a str, &'a Value)> {
    nodes
        .iter()
        .filter(|n| views::is_live(n, now) && n.handlers.iter().any(|h| h == handler))
        .filter_map(|n| {
            let (id, schemas) = published.iter().find(|(id, _)| *id == n.node_id)?;
            schemas
                .get(handler)
                .map(|schema| (n.registered_at, id.as_str(), schema))
        })
        .max_by_key(|(registered_at, id, _)| (*registered_at, *id))
        .map(|(_, id, schema)| (id, schema))
}

/// Checks `payload` against `schema`: [`AdminError::Invalid`] on the field
/// that does not fit (`payload.items[0].sku`), saying what is wrong and
/// whose schema it is.
#[cfg(feature = "payload-schema")]
pub(crate) fn check_payload(handler: &str, node: &str, schema: &Value, payload: &Value) -> Result<(), AdminError> {
    // A schema that no longer compiles (published by an older node) checks
    // nothing rather than refusing every payload.
    let Ok(validator) = jsonschema::validator_for(schema) else {
        return Ok(());
    };
    let errors: Vec<_> = validator.iter_errors(payload).take(3).collect();
    let Some(first) = errors.first() else {
        return Ok(());
    };
    let message = errors
        .iter()
        .map(|e| match field_of(e) {
            at if at == "payload" => e.to_string(),
            at => format!("{at}: {e}"),
        })
        .collect::<Vec<_>>()
        .join("; ");
    Err(AdminError::invalid(
        field_of(first),
        format!("{message} (the payload schema of handler {handler:?}, as node {node:?} published it)"),
    ))
}

/// Without the `payload-schema` feature every payload fits.
#[cfg(not(feature = "payload-schema"))]
#[allow(clippy::unnecessary_wraps)]
pub(crate) fn check_payload(_: &str, _: &str, _: &Value, _: &Value) -> Result<(), AdminError> {
    Ok(())
}

/// The field an error is on, as the admin surface names fields:
/// `payload.customer`, `payload.lines[2].amount`; a missing property is
/// named itself, not its object.
#[cfg(feature = "payload-schema")]
fn field_of(error: &jsonschema::ValidationError<'_>) -> String {
    use jsonschema::error::ValidationErrorKind;
    use jsonschema::paths::LocationSegment;
    let mut field = "payload".to_owned();
    for segment in error.instance_path() {
        match segment {
            LocationSegment::Property(p) => {
                field.push('.');
                field.push_str(&p);
            }
            LocationSegment::Index(i) => field.push_str(&format!("[{i}]")),
        }
    }
    if let ValidationErrorKind::Required { property } = error.kind() {
        field.push('.');
        field.push_str(property.as_str().unwrap_or_default());
    }
    field
}

impl Admin {
    /// Checks `payload` against the schema `handler`'s live nodes published
    /// ([`schema_for`]): nothing to check when none did.
    pub(crate) async fn check_payload(&self, handler: &str, payload: &Value) -> Result<(), AdminError> {
        if !cfg!(feature = "payload-schema") {
            return Ok(());
        }
        let published = self.store.payload_schemas().await?;
        if published.is_empty() {
            return Ok(());
        }
        let now = self.store.now().await?;
        let nodes = self.store.list_nodes().await?;
        match schema_for(handler, &nodes, &published, now) {
            Some((node, schema)) => check_payload(handler, node, schema, payload),
            None => Ok(()),
        }
    }

    /// The payload schema a job of `handler` is checked against, and the
    /// node that published it ([`TypedJob::payload_schema`](crate::engine::TypedJob::payload_schema)):
    /// what the API serves and the console shows beside a payload. `None`
    /// when no live node offering the handler published one.
    ///
    /// # Errors
    ///
    /// The store failing.
    pub async fn payload_schema(&self, handler: &str) -> Result<Option<PayloadSchemaView>, AdminError> {
        let published = self.store.payload_schemas().await?;
        if published.is_empty() {
            return Ok(None);
        }
        let now = self.store.now().await?;
        let nodes = self.store.list_nodes().await?;
        Ok(
            schema_for(handler, &nodes, &published, now).map(|(node, schema)| PayloadSchemaView {
                handler: handler.to_owned(),
                node: node.to_owned(),
                schema: schema.clone(),
            }),
        )
    }
}

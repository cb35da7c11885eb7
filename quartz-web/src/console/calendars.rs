//! The console's calendars: the list, one calendar with what it excludes,
//! and (for the admin role) adding, replacing and deleting one as its JSON
//! definition, each error beside its field.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use maud::{Markup, html};
use quartz_core::admin::{AdminError, CalendarView};
use quartz_core::calendar::CalendarDefinition;

use super::html::{self, Section, empty, instant, segment};
use super::pages::Notice;
use super::{AdminForm, Fields, Viewer};
use crate::AppState;

fn table(viewer: &Viewer, calendars: &[CalendarView], now: i64) -> Markup {
    html! {
        table {
            thead { tr { th { "Name" } th { "Excludes" } th { "Time zone" } th { "Base" } th { "Description" } th { "Updated" } } }
            tbody {
                @for c in calendars {
                    tr {
                        td { a href={ (viewer.base) "/calendars/" (segment(&c.name)) } { (c.name) } }
                        td { (c.definition.describe()) }
                        td { (c.definition.time_zone.as_deref().unwrap_or("UTC")) }
                        td {
                            @if let Some(base) = &c.definition.base {
                                a href={ (viewer.base) "/calendars/" (segment(base)) } { (base) }
                            }
                        }
                        td { (c.definition.description) }
                        td { (instant(Some(c.updated_at), now)) }
                    }
                }
            }
        }
    }
}

pub(crate) async fn list(State(state): State<AppState>, viewer: Viewer, Query(notice): Query<Notice>) -> Response {
    let (calendars, now) = match (state.admin.calendars().await, state.admin.now().await) {
        (Ok(c), Ok(n)) => (c, n.as_millis()),
        (Err(e), _) | (_, Err(e)) => return viewer.failure(&e),
    };
    let body = html! {
        p.lead {
            "Times a trigger does not fire at. A trigger names its calendar; a calendar may add a base calendar's exclusions to its own."
        }
        @if viewer.role == crate::Role::Admin {
            p { a.button.primary href={ (viewer.base) "/new-calendar" } { "New calendar" } }
        }
        @if calendars.is_empty() {
            (empty("No calendars. Add one here, with quartz calendar add, or with PUT /api/v1/calendars/{name}."))
        } @else {
            (table(&viewer, &calendars, now))
        }
    };
    let text = notice.text(&viewer);
    viewer.ok(html::page(
        &viewer,
        Section::Calendars,
        "Calendars",
        text.as_deref(),
        body,
    ))
}

/// The calendar form's fields, as typed.
struct CalendarForm {
    name: String,
    definition: String,
    /// The version a replace is made against (the one the page showed).
    version: Option<i64>,
}

/// An error beside a field (`name` or `definition`), or above the form.
type FieldError = Option<(&'static str, String)>;

fn form(viewer: &Viewer, form: &CalendarForm, error: &FieldError, editing: bool) -> Markup {
    let action = if editing {
        format!("{}/calendars/{}", viewer.base, segment(&form.name))
    } else {
        format!("{}/new-calendar", viewer.base)
    };
    let error_for = |field: &str| error.as_ref().filter(|(f, _)| *f == field).map(|(_, m)| m.clone());
    html! {
        form.job-form method="post" action=(action) novalidate {
            (html::csrf(viewer))
            @if let Some(version) = form.version { input type="hidden" name="version" value=(version); }
            @if !editing {
                div.field {
                    label for="name" { "Name" }
                    input #name type="text" name="name" value=(form.name) placeholder="holidays";
                    @if let Some(e) = error_for("name") { p.field-error data-field="name" { (e) } }
                }
            }
            div.field {
                label for="definition" { "Definition (JSON)" }
                textarea #definition name="definition" rows="8" spellcheck="false" { (form.definition) }
                small.hint {
                    "kind: holiday (days: [\"2026-12-25\"]), annual ([\"12-25\"]), monthly ([\"1\", \"15\"]), weekly ([\"sat\", \"sun\"]), "
                    "daily (range: \"09:00-17:30\", invert), cron (cron: \"* * 0-6 ? * *\"); time_zone, base, description."
                }
                @if let Some(e) = error_for("definition") { p.field-error data-field="definition" { (e) } }
            }
            div.buttons {
                (html::submit(viewer, "save", "primary", if editing { "Replace" } else { "Add calendar" }))
                " "
                a href={ (viewer.base) "/calendars" } { "Cancel" }
            }
        }
    }
}

pub(crate) async fn show(
    State(state): State<AppState>,
    viewer: Viewer,
    Path(name): Path<String>,
    Query(notice): Query<Notice>,
) -> Response {
    let (calendar, now) = match (state.admin.calendar(&name).await, state.admin.now().await) {
        (Ok(c), Ok(n)) => (c, n.as_millis()),
        (Err(e), _) | (_, Err(e)) => return viewer.failure(&e),
    };
    let text = notice.text(&viewer);
    respond_one(&viewer, StatusCode::OK, &calendar, now, None, None, text.as_deref())
}

/// One calendar's page: what it excludes, and for the admin role the
/// replace and delete forms (`typed` is a replacement refused, kept as typed).
fn respond_one(
    viewer: &Viewer,
    status: StatusCode,
    calendar: &CalendarView,
    now: i64,
    typed: Option<&str>,
    error: FieldError,
    notice: Option<&str>,
) -> Response {
    let pretty = serde_json::to_string_pretty(&calendar.definition).unwrap_or_default();
    let body = html! {
        (table(viewer, std::slice::from_ref(calendar), now))
        p { "Added " (instant(Some(calendar.created_at), now)) "." }
        @if viewer.role == crate::Role::Admin {
            h2 { "Replace" }
            p.hint { "The triggers that use it (directly or through a base) take the new definition at once, on every node." }
            (form(viewer, &CalendarForm {
                name: calendar.name.clone(),
                definition: typed.unwrap_or(&pretty).to_owned(),
                version: Some(calendar.version),
            }, &error, true))
            h2 { "Delete" }
            form.inline method="post" action={ (viewer.base) "/calendars/" (segment(&calendar.name)) "/delete" } {
                (html::csrf(viewer))
                input type="hidden" name="version" value=(calendar.version);
                (html::submit(viewer, "delete", "danger", &format!("Delete {}", calendar.name)))
            }
            p.hint { "A calendar a trigger or another calendar uses is not deleted; the refusal names them." }
        } @else {
            (html::json(&serde_json::to_value(&calendar.definition).unwrap_or_default()))
        }
    };
    let title = format!("Calendar {}", calendar.name);
    viewer.respond(status, html::page(viewer, Section::Calendars, &title, notice, body))
}

pub(crate) async fn new_page(viewer: Viewer) -> Response {
    let blank = CalendarForm {
        name: String::new(),
        definition: "{\n  \"kind\": \"weekly\",\n  \"days\": [\"sat\", \"sun\"],\n  \"time_zone\": \"UTC\"\n}"
            .to_owned(),
        version: None,
    };
    let body = form(&viewer, &blank, &None, false);
    viewer.ok(html::page(&viewer, Section::Calendars, "New calendar", None, body))
}

/// The field an admin error is beside: the definition's own fields
/// (`range`, `base`, ...) are all in the one text area.
fn field_of(e: &AdminError) -> FieldError {
    match e {
        AdminError::Invalid { field, message } if field == "name" => Some(("name", message.clone())),
        AdminError::Invalid { field, message } if field.is_empty() => Some(("definition", message.clone())),
        AdminError::Invalid { field, message } => Some(("definition", format!("{field}: {message}"))),
        AdminError::CalendarNotFound { .. } => Some(("definition", e.to_string())),
        AdminError::CalendarExists { name } => Some((
            "name",
            format!("a calendar named {name:?} exists; replace it from its page"),
        )),
        AdminError::Stale { current, .. } => Some((
            "definition",
            match current {
                Some(_) => "while you edited, this calendar was replaced: the definition above is yours and \
                            nothing was saved; compare it with the one now stored (shown in the table), and \
                            replace again to store yours"
                    .to_owned(),
                None => "while you edited, this calendar was deleted: nothing was saved".to_owned(),
            },
        )),
        _ => None,
    }
}

/// Adds (`name` from the form, only if none of that name exists) or
/// replaces (`name` from the path) a calendar.
async fn put(state: &AppState, viewer: &Viewer, name: &str, fields: &Fields, only_new: bool) -> Result<(), FieldError> {
    let definition: CalendarDefinition = serde_json::from_str(fields.get("definition"))
        .map_err(|e| Some(("definition", format!("not a calendar definition: {e}"))))?;
    let admin = state.admin.acting_as(viewer.actor);
    let written = if only_new {
        admin.calendar_add(name, &definition).await
    } else {
        admin.calendar_put(name, &definition, fields.version()).await
    };
    written
        .map(|_| ())
        .map_err(|e| field_of(&e).or_else(|| Some(("definition", e.to_string()))))
}

pub(crate) async fn create(State(state): State<AppState>, AdminForm { viewer, fields }: AdminForm) -> Response {
    let name = fields.get("name").trim().to_owned();
    let error = if name.is_empty() {
        Some(("name", "a calendar needs a name".to_owned()))
    } else {
        put(&state, &viewer, &name, &fields, true).await.err().flatten()
    };
    match error {
        None => viewer.redirect(&format!(
            "/calendars/{}{}",
            segment(&name),
            viewer.notice_query("created", &name)
        )),
        Some(error) => {
            let typed = CalendarForm {
                name,
                definition: fields.get("definition").to_owned(),
                version: None,
            };
            let body = form(&viewer, &typed, &Some(error), false);
            viewer.respond(
                StatusCode::BAD_REQUEST,
                html::page(&viewer, Section::Calendars, "New calendar", None, body),
            )
        }
    }
}

pub(crate) async fn replace(
    State(state): State<AppState>,
    Path(name): Path<String>,
    AdminForm { viewer, fields }: AdminForm,
) -> Response {
    match put(&state, &viewer, &name, &fields, false).await {
        Ok(()) => viewer.redirect(&format!(
            "/calendars/{}{}",
            segment(&name),
            viewer.notice_query("saved", &name)
        )),
        Err(error) => {
            // As stored now: a replace refused as stale is shown the
            // calendar that replaced the one it was made against.
            let current = match state.admin.calendar(&name).await {
                Ok(c) => c,
                Err(e) => return viewer.failure(&e),
            };
            let now = state.admin.now().await.map_or(0, |n| n.as_millis());
            let typed = fields.get("definition");
            respond_one(
                &viewer,
                StatusCode::BAD_REQUEST,
                &current,
                now,
                Some(typed),
                error,
                None,
            )
        }
    }
}

pub(crate) async fn delete(
    State(state): State<AppState>,
    Path(name): Path<String>,
    AdminForm { viewer, fields }: AdminForm,
) -> Response {
    match state
        .admin
        .acting_as(viewer.actor)
        .calendar_delete(&name, fields.version())
        .await
    {
        Ok(()) => viewer.redirect(&format!("/calendars{}", viewer.notice_query("deleted", &name))),
        Err(e) => viewer.failure(&e),
    }
}

//! The console's page frame and the small pieces every page uses: links,
//! instants, state badges and the SVG bar charts. Everything goes through
//! maud, which escapes every value it renders.

use maud::{DOCTYPE, Markup, html};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use quartz_core::Timestamp;

use super::Viewer;
use crate::access::Role;

/// What a path segment keeps unencoded.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'.').remove(b'~');

/// A job's name as one path segment.
pub(crate) fn segment(name: &str) -> String {
    utf8_percent_encode(name, SEGMENT).to_string()
}

/// A console path under the mount point: `/` is the mount point itself
/// (`/quartz` when nested there, since `/quartz/` is not routed).
pub(crate) fn at(base: &str, path: &str) -> String {
    match (base.is_empty(), path) {
        (false, "/") => base.to_owned(),
        _ => format!("{base}{path}"),
    }
}

/// A query string from pairs, the empty values left out.
pub(crate) fn query(pairs: &[(&str, &str)]) -> String {
    let mut q = form_urlencoded::Serializer::new(String::new());
    for (k, v) in pairs.iter().filter(|(_, v)| !v.is_empty()) {
        q.append_pair(k, v);
    }
    let q = q.finish();
    if q.is_empty() { q } else { format!("?{q}") }
}

/// How often a live page refreshes itself, in seconds.
pub(crate) const LIVE_SECONDS: u32 = 5;

/// The sections of the navigation bar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Section {
    Overview,
    Jobs,
    History,
    Nodes,
    Calendars,
    Changes,
    None,
}

/// A whole page: the frame, the navigation and `body`.
pub(crate) fn page(viewer: &Viewer, section: Section, title: &str, notice: Option<&str>, body: Markup) -> Markup {
    let base = &viewer.base;
    let nav = [
        (Section::Overview, "Overview", "/"),
        (Section::Jobs, "Jobs", "/jobs"),
        (Section::History, "History", "/fires"),
        (Section::Nodes, "Nodes", "/nodes"),
        (Section::Calendars, "Calendars", "/calendars"),
        (Section::Changes, "Changes", "/changes"),
    ];
    html! {
        (DOCTYPE)
        html lang="en" {
            (head(base, title, true))
            // The sections whose pages refresh themselves (every
            // `data-live` seconds; the script leaves forms alone).
            body data-base=(base) data-csrf=(viewer.csrf)
                data-live=[matches!(section, Section::Overview | Section::Jobs | Section::History | Section::Nodes | Section::Changes).then_some(LIVE_SECONDS)] {
                header.top {
                    a.brand href=(at(base, "/")) { "quartz" }
                    span.scheduler title="scheduler" { (viewer.scheduler) }
                    nav {
                        @for (s, label, path) in nav {
                            a.current[s == section] href=(at(base, path)) { (label) }
                        }
                    }
                    span.who {
                        span.badge.(viewer.role.as_str()) { (viewer.actor) }
                        @if viewer.logged_in {
                            form.inline method="post" action={ (base) "/logout" } {
                                (csrf(viewer))
                                button.link type="submit" { "Log out" }
                            }
                        }
                    }
                }
                main {
                    h1 { (title) }
                    @if let Some(notice) = notice {
                        p.notice role="status" { (notice) }
                    }
                    (body)
                }
            }
        }
    }
}

/// A page's head: its title, the stylesheet, and the script if it needs it.
pub(crate) fn head(base: &str, title: &str, script: bool) -> Markup {
    html! {
        head {
            meta charset="utf-8";
            meta name="viewport" content="width=device-width, initial-scale=1";
            title { (title) " · quartz" }
            link rel="stylesheet" href={ (base) "/assets/console.css" };
            @if script { script src={ (base) "/assets/console.js" } defer {} }
        }
    }
}

/// The hidden CSRF field every form carries.
pub(crate) fn csrf(viewer: &Viewer) -> Markup {
    html! { input type="hidden" name="csrf" value=(viewer.csrf); }
}

/// A small form posting one action on a job.
pub(crate) fn action(viewer: &Viewer, job: &str, verb: &str, label: &str, from: &str) -> Markup {
    html! {
        form.inline method="post" action={ (viewer.base) "/jobs/" (segment(job)) "/" (verb) } {
            (csrf(viewer))
            input type="hidden" name="from" value=(from);
            button type="submit" class={ "act " (verb) } disabled[viewer.role != Role::Admin] { (label) }
        }
    }
}

/// The buttons of a job: pause or resume, fire now, edit, delete.
pub(crate) fn job_actions(viewer: &Viewer, job: &str, state: &str, from: &str) -> Markup {
    html! {
        span.actions {
            @if state == "paused" {
                (action(viewer, job, "resume", "Resume", from))
            } @else {
                (action(viewer, job, "pause", "Pause", from))
            }
            (action(viewer, job, "trigger", if state == "paused" { "Fire now (stays paused)" } else { "Fire now" }, from))
            @if viewer.role == Role::Admin {
                a.act href={ (viewer.base) "/jobs/" (segment(job)) "/edit" } { "Edit" }
                a.act.delete href={ (viewer.base) "/jobs/" (segment(job)) "/delete" } { "Delete" }
            }
        }
    }
}

/// A link to a job's page.
pub(crate) fn job_link(viewer: &Viewer, name: &str) -> Markup {
    html! { a.job href={ (viewer.base) "/jobs/" (segment(name)) } { (name) } }
}

/// An instant in UTC, and how far it is from `now`.
pub(crate) fn instant(ms: Option<i64>, now: i64) -> Markup {
    match ms {
        None => html! { span.none { "—" } },
        Some(ms) => {
            let text = Timestamp::from_millis(ms).to_string();
            html! {
                time datetime=(text) title=(text) {
                    (text.replace('T', " ").trim_end_matches('Z')) " UTC "
                    small { (relative(ms - now)) }
                }
            }
        }
    }
}

/// An instant in a trigger's time zone, with its offset and the zone's
/// name, UTC beside it, and how far it is from `now`; as [`instant`] for
/// a trigger with no zone (or UTC).
pub(crate) fn zoned(ms: Option<i64>, zone: Option<&str>, now: i64) -> Markup {
    let Some(ms) = ms else { return instant(None, now) };
    let Some(zone) = zone.filter(|z| !z.is_empty() && *z != "UTC" && *z != "Etc/UTC") else {
        return instant(Some(ms), now);
    };
    let local = quartz_core::admin::local_time(ms, Some(zone));
    let utc = Timestamp::from_millis(ms).to_string();
    // `2026-12-24T06:00:00.000+01:00`: the date and time, then the offset.
    let (clock, offset) = local.split_at(local.len().saturating_sub(6));
    html! {
        time.zoned datetime=(local) title={ (local) " = " (utc) } {
            (clock.replace('T', " ")) " " span.offset { (offset) } " " span.zone { (zone) }
            " " small.utc { "(" (utc.get(11..19).unwrap_or(&utc)) " UTC)" }
            " " small { (relative(ms - now)) }
        }
    }
}

/// `in 3 s`, `4 min ago`, …
pub(crate) fn relative(delta_ms: i64) -> String {
    let ago = delta_ms < 0;
    let s = delta_ms.unsigned_abs() / 1000;
    let amount = match s {
        0 => return "now".to_owned(),
        1..=119 => format!("{s} s"),
        120..=7199 => format!("{} min", s / 60),
        7200..=172_799 => format!("{} h", s / 3600),
        _ => format!("{} d", s / 86_400),
    };
    if ago {
        format!("{amount} ago")
    } else {
        format!("in {amount}")
    }
}

/// Milliseconds for people.
pub(crate) fn millis(ms: Option<i64>) -> Markup {
    match ms {
        None => html! { span.none { "—" } },
        Some(ms) if ms.abs() < 10_000 => html! { (ms) " ms" },
        Some(ms) => html! { (format!("{:.1}", ms as f64 / 1000.0)) " s" },
    }
}

/// A state as a coloured badge.
pub(crate) fn badge(state: &str) -> Markup {
    html! { span class={ "badge " (state) } { (state) } }
}

/// A chart's axes: what the bars count (the y axis's unit) and what the
/// x axis runs over.
pub(crate) struct Axes<'a> {
    /// The unit of the values (`fires`).
    pub(crate) y_unit: &'a str,
    /// What the x axis runs over (`minutes ago`).
    pub(crate) x_title: &'a str,
}

/// A bar chart in SVG, one bar per `(label, value)` with a tooltip, on
/// axes: the y axis ticked at 0, half and the top with its unit, the x axis
/// labelled (every bar's label when `every_label`, else the first, middle
/// and last) and titled.
pub(crate) fn bars(id: &str, caption: &str, values: &[(String, usize)], every_label: bool, axes: &Axes<'_>) -> Markup {
    const W: usize = 640;
    const H: usize = 170;
    const LEFT: usize = 46; // room for the y axis's ticks
    const TOP: usize = 14;
    const BOTTOM: usize = 36; // room for the x labels and the x axis's title
    let top = values.iter().map(|(_, v)| *v).max().unwrap_or(0).max(1);
    // A round top for the ticks: 1, 2 or 5 times a power of ten.
    let step = {
        let mut magnitude = 1;
        while magnitude * 10 <= top {
            magnitude *= 10;
        }
        [1, 2, 5, 10]
            .iter()
            .map(|m| m * magnitude)
            .find(|s| *s >= top)
            .unwrap_or(top)
    };
    let n = values.len().max(1);
    let width = W - LEFT;
    let slot = width / n;
    let bar = slot.saturating_sub(2).max(1);
    let floor = H - BOTTOM;
    let plot = floor - TOP;
    let height = |v: usize| (v * plot).div_ceil(step);
    let labelled = |i: usize| every_label || i == 0 || i == n - 1 || i == n / 2;
    html! {
        figure.chart id=(id) {
            figcaption { (caption) }
            svg viewBox={ "0 0 " (W) " " (H) } role="img" aria-label=(caption) {
                @for tick in [0, step / 2, step] {
                    @let y = floor - height(tick);
                    line.grid x1=(LEFT) y1=(y) x2=(W) y2=(y) {}
                    text.tick x=(LEFT - 6) y=(y + 4) text-anchor="end" { (tick) }
                }
                text.unit x="0" y=(TOP - 4) { (axes.y_unit) }
                @for (i, (label, value)) in values.iter().enumerate() {
                    @let h = height(*value);
                    @let x = LEFT + i * slot;
                    rect.bar x=(x) y=(floor - h) width=(bar) height=(h) {
                        title { (label) ": " (value) " " (axes.y_unit) }
                    }
                    @if every_label && *value > 0 {
                        text.value x=(x + bar / 2) y=(floor - h - 3) text-anchor="middle" { (value) }
                    }
                    @if labelled(i) {
                        text.label x=(x + bar / 2) y=(floor + 14) text-anchor="middle" { (label) }
                    }
                }
                line.axis x1=(LEFT) y1=(floor) x2=(W) y2=(floor) {}
                line.axis x1=(LEFT) y1=(TOP) x2=(LEFT) y2=(floor) {}
                text.title x=(LEFT + width / 2) y=(H - 3) text-anchor="middle" { (axes.x_title) }
            }
        }
    }
}

/// Pretty JSON, for a payload.
pub(crate) fn json(value: &serde_json::Value) -> Markup {
    let text = serde_json::to_string_pretty(value).unwrap_or_default();
    html! { pre.json { (text) } }
}

/// A note that a section is empty.
pub(crate) fn empty(text: &str) -> Markup {
    html! { p.empty { (text) } }
}

/// A link to the next page, if there is one.
pub(crate) fn next_page(href: Option<String>) -> Markup {
    pager(None, href)
}

/// Links to the previous and the next page, where there are.
pub(crate) fn pager(back: Option<String>, next: Option<String>) -> Markup {
    html! {
        @if back.is_some() || next.is_some() {
            p.pager {
                @if let Some(href) = back { a.back href=(href) { "← Previous page" } }
                @if let Some(href) = next { " " a.next href=(href) { "Next page →" } }
            }
        }
    }
}

/// A form's submit button: disabled, with a line saying why, for a
/// read-only session (the server refuses its post all the same).
pub(crate) fn submit(viewer: &Viewer, id: &str, class: &str, label: &str) -> Markup {
    html! {
        button #(id) class=(class) type="submit" disabled[viewer.read_only()] { (label) }
        @if viewer.read_only() {
            " "
            span.hint.read-only { "Read-only session: log in with the admin token to change this." }
        }
    }
}

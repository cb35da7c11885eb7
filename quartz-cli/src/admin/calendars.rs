//! `quartz calendar …`: add (or replace), list, show and delete the
//! calendars whose excluded times are not fire times.

use quartz_core::admin::{Admin, AdminError, CalendarView};
use quartz_core::calendar::{CalendarDefinition, CalendarType};
use quartz_store::AnyStore;
use serde_json::{Value, json};

use super::*;
use crate::admin::jobs::CLI_ACTOR;

/// The `calendar` subcommands.
#[derive(clap::Subcommand)]
pub enum CalendarCommand {
    /// Add a calendar (with --replace, replace the one of that name: the
    /// triggers that use it are rescheduled on every node).
    ///
    /// Examples:
    ///   quartz calendar add holidays --kind holiday --dates 2026-12-25,2027-01-01 --tz Europe/Paris
    ///   quartz calendar add christmas --kind annual --days 12-24,12-25,12-26
    ///   quartz calendar add month-end --kind monthly --days 28,29,30,31
    ///   quartz calendar add weekends --kind weekly --days sat,sun --base holidays
    ///   quartz calendar add office --kind daily --range 09:00-17:30 --invert --tz America/New_York
    ///   quartz calendar add maintenance --kind cron --cron "* 0-29 3 ? * SUN"
    #[command(verbatim_doc_comment)]
    Add {
        /// The calendar's name, unique in the scheduler.
        name: String,
        /// holiday, annual, monthly, weekly, daily or cron.
        #[arg(long, value_parser = kind_arg)]
        kind: CalendarType,
        /// The days excluded, comma-separated: dates (holiday, 2026-12-25),
        /// days of the year (annual, 12-25), days of the month (monthly, 1-31)
        /// or days of the week (weekly, mon-sun).
        #[arg(long, visible_alias = "days", value_delimiter = ',')]
        dates: Vec<String>,
        /// For daily: the time range, HH:MM[:SS[.mmm]]-HH:MM[:SS[.mmm]], both ends included.
        #[arg(long)]
        range: Option<String>,
        /// For daily: exclude every time but the range.
        #[arg(long)]
        invert: bool,
        /// For cron: the expression whose seconds are excluded.
        #[arg(long)]
        cron: Option<String>,
        /// The calendar's time zone [default: UTC].
        #[arg(long)]
        tz: Option<String>,
        /// A base calendar, by name, whose exclusions this one adds to its own.
        #[arg(long)]
        base: Option<String>,
        /// Free text.
        #[arg(long, default_value = "")]
        description: String,
        /// Replace a calendar of that name instead of refusing.
        #[arg(long)]
        replace: bool,
    },
    /// List the calendars.
    ///
    /// Example:
    ///   quartz calendar list --json
    #[command(verbatim_doc_comment)]
    List,
    /// Show a calendar.
    ///
    /// Example:
    ///   quartz calendar show holidays
    #[command(verbatim_doc_comment)]
    Show {
        /// The calendar.
        name: String,
    },
    /// Delete a calendar that no trigger and no other calendar uses.
    ///
    /// Example:
    ///   quartz calendar delete holidays
    #[command(verbatim_doc_comment)]
    Delete {
        /// The calendar.
        name: String,
    },
}

fn kind_arg(text: &str) -> Result<CalendarType, String> {
    serde_json::from_value(Value::String(text.to_ascii_lowercase()))
        .map_err(|_| format!("{text:?} is not a kind of calendar (holiday, annual, monthly, weekly, daily, cron)"))
}

fn view_json(c: &CalendarView) -> Value {
    serde_json::to_value(c).unwrap_or(Value::Null)
}

/// What a calendar excludes, in a line: `weekly sat,sun (UTC), base holidays`.
/// What a calendar excludes, its zone and its base, on one line.
fn describe_calendar(d: &CalendarDefinition) -> String {
    let mut line = format!("{} ({})", d.describe(), d.time_zone.as_deref().unwrap_or("UTC"));
    if let Some(base) = &d.base {
        line.push_str(&format!(", base {base}"));
    }
    line
}

/// Runs a `calendar` subcommand through the admin surface, recorded in the
/// change log as made by `cli`.
pub async fn calendar(url: &str, scheduler: &str, out: Out, command: CalendarCommand) -> anyhow::Result<()> {
    let store = AnyStore::connect(url).await?;
    let admin = Admin::new(store, scheduler).acting_as(CLI_ACTOR);
    match command {
        CalendarCommand::Add {
            name,
            kind,
            dates,
            range,
            invert,
            cron,
            tz,
            base,
            description,
            replace,
        } => {
            let definition = CalendarDefinition {
                kind,
                days: dates
                    .into_iter()
                    .map(|d| d.trim().to_owned())
                    .filter(|d| !d.is_empty())
                    .collect(),
                range,
                invert,
                cron,
                time_zone: tz,
                base,
                description,
            };
            let view = if replace {
                admin.calendar_put(&name, &definition, None).await?
            } else {
                match admin.calendar_add(&name, &definition).await {
                    Err(AdminError::CalendarExists { .. }) => {
                        anyhow::bail!("a calendar named {name:?} exists; give --replace to replace it")
                    }
                    added => added?,
                }
            };
            out.print(&view_json(&view), || {
                format!("calendar {name}: {}\n", describe_calendar(&view.definition))
            });
            Ok(())
        }
        CalendarCommand::List => {
            let calendars = admin.calendars().await?;
            let value = Value::Array(calendars.iter().map(view_json).collect());
            out.print(&value, || {
                if calendars.is_empty() {
                    return format!("no calendars in scheduler {scheduler:?}\n");
                }
                let rows: Vec<Vec<String>> = calendars
                    .iter()
                    .map(|c| {
                        vec![
                            c.name.clone(),
                            describe_calendar(&c.definition),
                            show_instant(Timestamp::from_millis(c.updated_at)),
                        ]
                    })
                    .collect();
                table(&["CALENDAR", "EXCLUDES", "UPDATED"], &rows)
            });
            Ok(())
        }
        CalendarCommand::Show { name } => {
            let c = admin.calendar(&name).await?;
            out.print(&view_json(&c), || {
                let definition = serde_json::to_string_pretty(&c.definition).unwrap_or_default();
                format!(
                    "calendar {}\n  excludes    {}\n  added       {}\n  updated     {}\n  definition  {}\n",
                    c.name,
                    describe_calendar(&c.definition),
                    show_instant(Timestamp::from_millis(c.created_at)),
                    show_instant(Timestamp::from_millis(c.updated_at)),
                    definition.replace('\n', "\n              "),
                )
            });
            Ok(())
        }
        CalendarCommand::Delete { name } => {
            admin.calendar_delete(&name, None).await?;
            out.print(&json!({"calendar": name, "deleted": true}), || {
                format!("deleted calendar {name}\n")
            });
            Ok(())
        }
    }
}

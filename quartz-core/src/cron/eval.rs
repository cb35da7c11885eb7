//! Next fire time: Quartz's `CronExpression.getTimeAfter`, step for step, over an
//! emulation of the lenient `java.util.GregorianCalendar` it runs on.
//!
//! Quartz walks the fields of a calendar in the trigger's zone (second, minute,
//! hour, day, month, year), setting them and letting the calendar normalise. Two
//! properties of that calendar decide what happens at DST edges, and both are kept:
//!
//! - Setting a field never fails: out-of-range values carry over (minute 60 is the
//!   next hour, day 32 the next month, month 13 the next year).
//! - A wall time is resolved to an instant with the offset of the latest zone
//!   transition whose wall time (in the new offset) is not after it. So a wall time
//!   in a spring-forward gap takes the offset before the gap (02:30 in New York on
//!   the spring day is 03:30 EDT), and one in a fall-back overlap takes the later
//!   instant (01:30 on the autumn day is 01:30 EST).
//!
//! Quartz also moves forward after such a shift with the calendar's shifted
//! fields, which can pass over a time that exists: in Australia/Lord_Howe, whose
//! clocks jump from 02:00 to 02:30, `0 5/7 * * * ?` after 01:54 resolves 02:05 to
//! 02:35 and fires next at 02:40, not 02:33. The shared cases file from Quartz
//! itself holds that case; `tests/cron_quartz_cases.rs` checks it.

use chrono::{DateTime, Datelike, LocalResult, NaiveDate, NaiveDateTime, Offset, TimeZone, Timelike};
use chrono_tz::Tz;

use super::parse::{Fields, MAX_YEAR, MIN_YEAR, Set};

/// Calendar fields, 1-based month as Quartz's code uses them after its `+ 1`.
#[derive(Debug, Clone, Copy)]
enum Field {
    Second,
    Minute,
    Hour,
    Day,
    Month,
    Year,
}

/// The lenient calendar: fields in the zone's wall time, normalised (through an
/// instant) the first time one is read after any was set.
struct Calendar<'a> {
    tz: &'a Tz,
    year: i64,
    month: i64,
    day: i64,
    hour: i64,
    minute: i64,
    second: i64,
    /// A field was set since the last normalisation.
    dirty: bool,
    /// The instant the fields denote, in epoch seconds, valid when not dirty.
    instant: i64,
}

impl<'a> Calendar<'a> {
    fn at(tz: &'a Tz, epoch_seconds: i64) -> Option<Calendar<'a>> {
        let mut c = Calendar {
            tz,
            year: 0,
            month: 0,
            day: 0,
            hour: 0,
            minute: 0,
            second: 0,
            dirty: false,
            instant: epoch_seconds,
        };
        c.load(epoch_seconds)?;
        Some(c)
    }

    /// Fields from an instant.
    fn load(&mut self, epoch_seconds: i64) -> Option<()> {
        let utc = DateTime::from_timestamp(epoch_seconds, 0)?;
        let local = self.tz.from_utc_datetime(&utc.naive_utc());
        self.year = i64::from(local.year());
        self.month = i64::from(local.month());
        self.day = i64::from(local.day());
        self.hour = i64::from(local.hour());
        self.minute = i64::from(local.minute());
        self.second = i64::from(local.second());
        self.instant = epoch_seconds;
        self.dirty = false;
        Some(())
    }

    /// Normalises the fields as Java's `complete()` does: wall time from the
    /// (possibly out-of-range) fields, instant by Java's zone rule, fields again.
    fn normalise(&mut self) -> Option<()> {
        if self.dirty {
            let wall = wall_seconds(self.year, self.month, self.day, self.hour, self.minute, self.second)?;
            let instant = resolve(self.tz, wall)?;
            self.load(instant)?;
        }
        Some(())
    }

    fn get(&mut self, field: Field) -> Option<i64> {
        self.normalise()?;
        Some(match field {
            Field::Second => self.second,
            Field::Minute => self.minute,
            Field::Hour => self.hour,
            Field::Day => self.day,
            Field::Month => self.month,
            Field::Year => self.year,
        })
    }

    fn set(&mut self, field: Field, value: i64) {
        match field {
            Field::Second => self.second = value,
            Field::Minute => self.minute = value,
            Field::Hour => self.hour = value,
            Field::Day => self.day = value,
            Field::Month => self.month = value,
            Field::Year => self.year = value,
        }
        self.dirty = true;
    }

    /// 1 = Sunday ... 7 = Saturday, as `Calendar.DAY_OF_WEEK`.
    fn day_of_week(&mut self) -> Option<i64> {
        self.normalise()?;
        day_of_week(self.year, self.month, self.day)
    }

    fn instant(&mut self) -> Option<i64> {
        self.normalise()?;
        Some(self.instant)
    }

    /// `set(SECOND, 0); set(MINUTE, 0); set(HOUR_OF_DAY, 0); set(DAY_OF_MONTH, day);
    /// set(MONTH, month)`: Quartz's move to the start of a day.
    fn start_of_day(&mut self, day: i64, month: i64) {
        self.set(Field::Second, 0);
        self.set(Field::Minute, 0);
        self.set(Field::Hour, 0);
        self.set(Field::Day, day);
        self.set(Field::Month, month);
    }

    /// Quartz's `setCalendarHour`: when the hour set does not survive normalisation
    /// (it fell into a gap), set the next hour instead, unless it was 24.
    fn set_hour(&mut self, hour: i64) -> Option<()> {
        self.set(Field::Hour, hour);
        if self.get(Field::Hour)? != hour && hour != 24 {
            self.set(Field::Hour, hour + 1);
        }
        Some(())
    }
}

/// Seconds since the epoch of a wall time given by lenient fields.
fn wall_seconds(year: i64, month: i64, day: i64, hour: i64, minute: i64, second: i64) -> Option<i64> {
    let months = month.checked_sub(1)?;
    let year = year.checked_add(months.div_euclid(12))?;
    let month = months.rem_euclid(12) + 1;
    let first = NaiveDate::from_ymd_opt(i32::try_from(year).ok()?, month as u32, 1)?;
    let days = first.signed_duration_since(NaiveDate::default()).num_days() + day - 1;
    Some(days * 86_400 + hour * 3_600 + minute * 60 + second)
}

/// The instant of a wall time, by Java's rule: a time in a gap takes the offset in
/// force before the gap; a time in an overlap takes the later instant.
fn resolve(tz: &Tz, wall: i64) -> Option<i64> {
    let naive: NaiveDateTime = DateTime::from_timestamp(wall, 0)?.naive_utc();
    Some(match tz.offset_from_local_datetime(&naive) {
        LocalResult::Single(offset) => wall - i64::from(offset.fix().local_minus_utc()),
        LocalResult::Ambiguous(a, b) => {
            (wall - i64::from(a.fix().local_minus_utc())).max(wall - i64::from(b.fix().local_minus_utc()))
        }
        LocalResult::None => {
            // Zone transitions are months apart, so a day earlier is before the gap.
            let before = DateTime::from_timestamp(wall - 86_400, 0)?.naive_utc();
            wall - i64::from(tz.offset_from_utc_datetime(&before).fix().local_minus_utc())
        }
    })
}

/// 1 = Sunday ... 7 = Saturday for a (lenient) date.
fn day_of_week(year: i64, month: i64, day: i64) -> Option<i64> {
    let days = wall_seconds(year, month, day, 0, 0, 0)?.div_euclid(86_400);
    // 1970-01-01 was a Thursday (5).
    Some((days + 4).rem_euclid(7) + 1)
}

fn last_day_of_month(month: i64, year: i64) -> i64 {
    match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        2 => 28,
        // Quartz's own helper throws here; its callers never pass such a month.
        _ => 31,
    }
}

/// `W`: the weekday nearest `day` within the month, as Quartz computes it.
fn nearest_weekday(day: i64, dow: i64, ldom: i64) -> i64 {
    const SATURDAY: i64 = 7;
    const SUNDAY: i64 = 1;
    if dow == SATURDAY && day == 1 {
        day + 2
    } else if dow == SATURDAY {
        day - 1
    } else if dow == SUNDAY && day == ldom {
        day - 2
    } else if dow == SUNDAY {
        day + 1
    } else {
        day
    }
}

/// A bound on loop iterations. Quartz's loop ends by running out of years; this
/// only guards against a case nobody has found, and is never reached by any
/// expression in the tests.
const MAX_STEPS: u32 = 100_000;

/// The next fire time strictly after `after_ms`, in epoch milliseconds.
pub(crate) fn next_after(f: &Fields, tz: &Tz, after_ms: i64) -> Option<i64> {
    // Quartz moves one second ahead and drops the milliseconds.
    //
    // In its `W` branches Quartz compares a candidate with the instant before the
    // milliseconds were dropped, on a temporary calendar that carries the wall
    // clock's current milliseconds, so within that one second its answer depends on
    // when it runs (it may skip a whole month). We compare whole seconds, which is
    // its answer whenever those milliseconds line up; the property test
    // `next_after_agrees_with_a_brute_force_matcher` found the case.
    let after_second = after_ms.checked_add(1000)?.div_euclid(1000);
    let mut cl = Calendar::at(tz, after_second)?;
    let years = |y: i64| f.years.first_from(y - MIN_YEAR).map(|v| v + MIN_YEAR);

    for _ in 0..MAX_STEPS {
        if cl.get(Field::Year)? > MAX_YEAR {
            return None;
        }

        // Second.
        let mut sec = cl.get(Field::Second)?;
        let mut min = cl.get(Field::Minute)?;
        match f.seconds.first_from(sec) {
            Some(s) => sec = s,
            None => {
                sec = f.seconds.first();
                min += 1;
                cl.set(Field::Minute, min);
            }
        }
        cl.set(Field::Second, sec);

        // Minute.
        min = cl.get(Field::Minute)?;
        let mut hr = cl.get(Field::Hour)?;
        let (next_min, wrapped) = next_in(&f.minutes, min);
        if wrapped || next_min != min {
            cl.set(Field::Second, 0);
            cl.set(Field::Minute, next_min);
            cl.set_hour(hr + i64::from(wrapped))?;
            continue;
        }
        cl.set(Field::Minute, min);

        // Hour.
        hr = cl.get(Field::Hour)?;
        let mut day = cl.get(Field::Day)?;
        let (next_hr, wrapped) = next_in(&f.hours, hr);
        if wrapped || next_hr != hr {
            cl.set(Field::Second, 0);
            cl.set(Field::Minute, 0);
            cl.set(Field::Day, day + i64::from(wrapped));
            cl.set_hour(next_hr)?;
            continue;
        }
        cl.set(Field::Hour, hr);

        // Day.
        day = cl.get(Field::Day)?;
        let mut mon = cl.get(Field::Month)?;
        // Quartz's sentinels: the day and month found, to compare with the current.
        let mut t = -1;
        let mut tmon = mon;
        if !f.dom_unspecified {
            let year = cl.get(Field::Year)?;
            if f.last_day_of_month {
                t = day;
                day = last_day_of_month(mon, year) - f.last_day_offset;
                if !f.nearest_weekday {
                    if t > day {
                        mon += 1;
                        if mon > 12 {
                            mon = 1;
                            tmon = 3333;
                            // `cl.add(YEAR, 1)`: normalise, then move the year.
                            let y = cl.get(Field::Year)?;
                            cl.set(Field::Year, y + 1);
                        }
                        day = 1;
                    }
                } else {
                    let ldom = last_day_of_month(mon, year);
                    day = nearest_weekday(day, day_of_week(year, mon, day)?, ldom);
                    let n_time = instant_of(tz, year, mon, day, hr, min, sec)?;
                    if n_time < after_second {
                        day = 1;
                        mon += 1;
                    }
                }
            } else if f.nearest_weekday {
                t = day;
                day = f.days_of_month.first();
                let ldom = last_day_of_month(mon, year);
                day = nearest_weekday(day, day_of_week(year, mon, day)?, ldom);
                let n_time = instant_of(tz, year, mon, day, hr, min, sec)?;
                if n_time < after_second {
                    day = f.days_of_month.first();
                    mon += 1;
                }
            } else if let Some(d) = f.days_of_month.first_from(day) {
                t = day;
                day = d;
                if day > last_day_of_month(mon, year) {
                    day = f.days_of_month.first();
                    mon += 1;
                }
            } else {
                day = f.days_of_month.first();
                mon += 1;
            }
            if day != t || mon != tmon {
                cl.start_of_day(day, mon);
                continue;
            }
        } else if f.last_day_of_week {
            let dow = f.days_of_week.first();
            let c_dow = cl.day_of_week()?;
            let mut days_to_add = days_until(c_dow, dow);
            let l_day = last_day_of_month(mon, cl.get(Field::Year)?);
            if day + days_to_add > l_day {
                cl.start_of_day(1, mon + 1);
                continue;
            }
            while day + days_to_add + 7 <= l_day {
                days_to_add += 7;
            }
            day += days_to_add;
            if days_to_add > 0 {
                cl.start_of_day(day, mon);
                continue;
            }
        } else if f.nth_day_of_week != 0 {
            let dow = f.days_of_week.first();
            let c_dow = cl.day_of_week()?;
            let mut days_to_add = days_until(c_dow, dow);
            let day_shifted = days_to_add > 0;
            day += days_to_add;
            let mut week_of_month = day / 7;
            if day % 7 > 0 {
                week_of_month += 1;
            }
            days_to_add = (f.nth_day_of_week - week_of_month) * 7;
            day += days_to_add;
            if days_to_add < 0 || day > last_day_of_month(mon, cl.get(Field::Year)?) {
                cl.start_of_day(1, mon + 1);
                continue;
            } else if days_to_add > 0 || day_shifted {
                cl.start_of_day(day, mon);
                continue;
            }
        } else {
            let c_dow = cl.day_of_week()?;
            let dow = f
                .days_of_week
                .first_from(c_dow)
                .unwrap_or_else(|| f.days_of_week.first());
            let days_to_add = days_until(c_dow, dow);
            let l_day = last_day_of_month(mon, cl.get(Field::Year)?);
            if day + days_to_add > l_day {
                cl.start_of_day(1, mon + 1);
                continue;
            } else if days_to_add > 0 {
                cl.start_of_day(day + days_to_add, mon);
                continue;
            }
        }
        cl.set(Field::Day, day);

        // Month.
        mon = cl.get(Field::Month)?;
        let mut year = cl.get(Field::Year)?;
        if year > MAX_YEAR {
            return None;
        }
        let (next_mon, wrapped) = next_in(&f.months, mon);
        if wrapped || next_mon != mon {
            cl.start_of_day(1, next_mon);
            cl.set(Field::Year, year + i64::from(wrapped));
            continue;
        }
        cl.set(Field::Month, mon);

        // Year.
        year = cl.get(Field::Year)?;
        let next_year = years(year)?;
        if next_year != year {
            cl.start_of_day(1, 1);
            cl.set(Field::Year, next_year);
            continue;
        }
        cl.set(Field::Year, year);
        return cl.instant().map(|s| s * 1000);
    }
    None
}

/// Quartz's `tailSet(current)` step: the field's least value at or after
/// `current`, or its first value with `true` when it wrapped (and the next larger
/// field must advance).
fn next_in(set: &Set, current: i64) -> (i64, bool) {
    match set.first_from(current) {
        Some(v) => (v, false),
        None => (set.first(), true),
    }
}

/// Days from weekday `from` forward to weekday `to` (both 1-7), 0 if equal.
fn days_until(from: i64, to: i64) -> i64 {
    if from < to {
        to - from
    } else if from > to {
        to + (7 - from)
    } else {
        0
    }
}

/// The instant, in milliseconds, of a local date and time of day in the zone,
/// as a lenient Java calendar sets it (a time in a gap moves forward; a time
/// in an overlap takes the later instant).
pub(crate) fn java_instant_ms(tz: &Tz, date: NaiveDate, ms_of_day: i64) -> Option<i64> {
    let wall = wall_seconds(
        i64::from(date.year()),
        i64::from(date.month()),
        i64::from(date.day()),
        0,
        0,
        ms_of_day.div_euclid(1000),
    )?;
    Some(resolve(tz, wall)? * 1000 + ms_of_day.rem_euclid(1000))
}

/// The instant of a wall time in the zone (Quartz's temporary calendar `tcal`).
fn instant_of(tz: &Tz, year: i64, month: i64, day: i64, hour: i64, minute: i64, second: i64) -> Option<i64> {
    resolve(tz, wall_seconds(year, month, day, hour, minute, second)?)
}

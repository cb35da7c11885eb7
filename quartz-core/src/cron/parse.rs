//! Parsing Quartz cron syntax into value sets and the special-day flags that
//! Quartz's `CronExpression` keeps (`lastdayOfMonth`, `nearestWeekday`, ...).

use crate::error::{CronField, Error};

/// The latest year an expression can name, and the last year evaluated.
pub(crate) const MAX_YEAR: i64 = 2099;
/// The earliest year an expression can name.
pub(crate) const MIN_YEAR: i64 = 1970;

/// A set of small non-negative integers (field values; years stored as `year - 1970`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub(crate) struct Set([u64; 3]);

impl Set {
    fn insert(&mut self, v: i64) {
        let v = v as usize;
        self.0[v / 64] |= 1 << (v % 64);
    }

    /// The least member `>= v` (Java's `tailSet(v).first()`).
    pub(crate) fn first_from(&self, v: i64) -> Option<i64> {
        let mut v = v.max(0);
        while v < 192 {
            let word = self.0[v as usize / 64] >> (v % 64);
            if word != 0 {
                return Some(v + i64::from(word.trailing_zeros()));
            }
            v = (v / 64 + 1) * 64;
        }
        None
    }

    /// The least member. Every parsed set has one (parsing refuses empty fields).
    pub(crate) fn first(&self) -> i64 {
        self.first_from(0).unwrap_or(0)
    }

    fn is_empty(&self) -> bool {
        self.0 == [0; 3]
    }
}

/// A parsed Quartz expression: what `CronExpression` holds after `buildExpression`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Fields {
    pub seconds: Set,
    pub minutes: Set,
    pub hours: Set,
    pub days_of_month: Set,
    pub months: Set,
    pub days_of_week: Set,
    /// Years as `year - 1970`.
    pub years: Set,
    /// Day-of-month is `?`.
    pub dom_unspecified: bool,
    /// Day-of-week is `?`.
    pub dow_unspecified: bool,
    /// `L` in day-of-month.
    pub last_day_of_month: bool,
    /// The `n` of `L-n`.
    pub last_day_offset: i64,
    /// `W` in day-of-month (`nW` or `LW`).
    pub nearest_weekday: bool,
    /// `nL` in day-of-week.
    pub last_day_of_week: bool,
    /// The `k` of `n#k`; 0 when absent.
    pub nth_day_of_week: i64,
}

const FIELDS: [CronField; 7] = [
    CronField::Seconds,
    CronField::Minutes,
    CronField::Hours,
    CronField::DayOfMonth,
    CronField::Month,
    CronField::DayOfWeek,
    CronField::Year,
];

const MONTHS: [&str; 12] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
const DAYS: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

/// Refuses an expression longer than [`super::MAX_CRON_BYTES`] before anything
/// else, without repeating it whole in the error.
fn check_length(expr: &str) -> Result<(), Error> {
    if expr.len() <= super::MAX_CRON_BYTES {
        return Ok(());
    }
    let head: String = expr.chars().take(40).collect();
    Err(Error::InvalidCron {
        expr: format!("{head}…"),
        field: None,
        text: format!("{head}…"),
        reason: format!("is {} bytes long; the most is {}", expr.len(), super::MAX_CRON_BYTES),
    })
}

/// Parses a 6- or 7-field Quartz expression.
pub(crate) fn parse(expr: &str) -> Result<Fields, Error> {
    check_length(expr)?;
    let whole = |reason: String| Error::InvalidCron {
        expr: expr.to_owned(),
        field: None,
        text: expr.to_owned(),
        reason,
    };
    let upper = expr.to_ascii_uppercase();
    let parts: Vec<&str> = upper.split_whitespace().collect();
    if parts.len() < 6 || parts.len() > 7 {
        return Err(whole(format!(
            "expected 6 or 7 fields (seconds minutes hours day-of-month month day-of-week [year]), found {}",
            parts.len()
        )));
    }
    let mut f = Fields {
        seconds: Set::default(),
        minutes: Set::default(),
        hours: Set::default(),
        days_of_month: Set::default(),
        months: Set::default(),
        days_of_week: Set::default(),
        years: Set::default(),
        dom_unspecified: false,
        dow_unspecified: false,
        last_day_of_month: false,
        last_day_offset: 0,
        nearest_weekday: false,
        last_day_of_week: false,
        nth_day_of_week: 0,
    };
    let year_text = parts.get(6).copied().unwrap_or("*");
    for (i, &field) in FIELDS.iter().enumerate() {
        let text = if i == 6 { year_text } else { parts[i] };
        let original = expr.split_whitespace().nth(i).unwrap_or(text);
        parse_field(&mut f, field, text).map_err(|reason| Error::InvalidCron {
            expr: expr.to_owned(),
            field: Some(field),
            text: original.to_owned(),
            reason,
        })?;
    }
    match (f.dom_unspecified, f.dow_unspecified) {
        (true, false) | (false, true) => Ok(f),
        (false, false) => Err(whole(
            "one of day-of-month and day-of-week must be '?': specifying both is not supported".to_owned(),
        )),
        (true, true) => Err(whole("day-of-month and day-of-week cannot both be '?'".to_owned())),
    }
}

/// The inclusive range of plain values a field takes.
fn bounds(field: CronField) -> (i64, i64) {
    match field {
        CronField::Seconds | CronField::Minutes => (0, 59),
        CronField::Hours => (0, 23),
        CronField::DayOfMonth => (1, 31),
        CronField::Month => (1, 12),
        CronField::DayOfWeek => (1, 7),
        CronField::Year => (MIN_YEAR, MAX_YEAR),
    }
}

fn range_error(field: CronField) -> String {
    let (lo, hi) = bounds(field);
    match field {
        CronField::Month => format!("values must be between {lo} and {hi} (or JAN-DEC)"),
        CronField::DayOfWeek => format!("values must be between {lo} and {hi}, 1 = Sunday (or SUN-SAT)"),
        _ => format!("values must be between {lo} and {hi}"),
    }
}

fn parse_field(f: &mut Fields, field: CronField, text: &str) -> Result<(), String> {
    let is_day = matches!(field, CronField::DayOfMonth | CronField::DayOfWeek);
    if text == "?" {
        if !is_day {
            return Err("'?' can only be used in day-of-month or day-of-week".to_owned());
        }
        match field {
            CronField::DayOfMonth => f.dom_unspecified = true,
            _ => f.dow_unspecified = true,
        }
        return Ok(());
    }
    let items: Vec<&str> = text.split(',').collect();
    if items.len() > 1 {
        if items.iter().any(|i| i.is_empty()) {
            return Err("empty item in a list".to_owned());
        }
        if items.contains(&"?") {
            return Err("'?' must stand alone".to_owned());
        }
        if field == CronField::DayOfMonth && text.contains('L') {
            return Err("'L' and 'LW' cannot be combined with other days of the month".to_owned());
        }
        if field == CronField::DayOfMonth && text.contains('W') {
            return Err("'W' cannot be combined with other days of the month".to_owned());
        }
        if field == CronField::DayOfWeek && text.contains('L') {
            return Err("'L' cannot be combined with other days of the week".to_owned());
        }
        if field == CronField::DayOfWeek && text.contains('#') {
            return Err("'#' cannot be combined with other days of the week".to_owned());
        }
    }
    let mut set = Set::default();
    for item in items {
        parse_item(f, field, item, &mut set)?;
    }
    if set.is_empty() && !(field == CronField::DayOfMonth && f.last_day_of_month) {
        return Err("selects no value".to_owned());
    }
    match field {
        CronField::Seconds => f.seconds = set,
        CronField::Minutes => f.minutes = set,
        CronField::Hours => f.hours = set,
        CronField::DayOfMonth => f.days_of_month = set,
        CronField::Month => f.months = set,
        CronField::DayOfWeek => f.days_of_week = set,
        CronField::Year => f.years = set,
    }
    Ok(())
}

/// A cursor over one list item.
struct Item<'a> {
    s: &'a [u8],
    i: usize,
}

impl Item<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn eat(&mut self, c: u8) -> bool {
        if self.peek() == Some(c) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    fn at_end(&self) -> bool {
        self.i >= self.s.len()
    }

    fn number(&mut self) -> Option<i64> {
        let start = self.i;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.i += 1;
        }
        if self.i == start || self.i - start > 9 {
            return None;
        }
        std::str::from_utf8(&self.s[start..self.i]).ok()?.parse().ok()
    }

    fn name(&mut self, field: CronField) -> Result<Option<i64>, String> {
        let rest = &self.s[self.i..];
        if rest.len() < 3 || !rest[..3].iter().all(u8::is_ascii_alphabetic) {
            return Ok(None);
        }
        let word = std::str::from_utf8(&rest[..3]).map_err(|e| e.to_string())?;
        let value = match field {
            CronField::Month => MONTHS.iter().position(|m| *m == word).map(|p| p as i64 + 1),
            CronField::DayOfWeek => DAYS.iter().position(|d| *d == word).map(|p| p as i64 + 1),
            _ => {
                return Err(format!(
                    "names such as '{word}' are only valid in month and day-of-week"
                ));
            }
        };
        match value {
            Some(v) => {
                self.i += 3;
                Ok(Some(v))
            }
            None => Err(format!("'{word}' is not a {field} name")),
        }
    }

    /// A value: a number, or (in month and day-of-week) a three-letter name.
    fn value(&mut self, field: CronField) -> Result<Option<(i64, bool)>, String> {
        if let Some(v) = self.name(field)? {
            return Ok(Some((v, true)));
        }
        Ok(self.number().map(|v| (v, false)))
    }
}

fn check_value(field: CronField, v: i64) -> Result<(), String> {
    let (lo, hi) = bounds(field);
    if v < lo || v > hi {
        Err(range_error(field))
    } else {
        Ok(())
    }
}

fn check_step(field: CronField, step: i64) -> Result<(), String> {
    let limit = match field {
        CronField::Seconds | CronField::Minutes => 59,
        CronField::Hours => 23,
        CronField::DayOfMonth => 31,
        CronField::Month => 12,
        CronField::DayOfWeek => 7,
        CronField::Year => MAX_YEAR - MIN_YEAR,
    };
    if step < 1 {
        Err("a step ('/n') must be at least 1".to_owned())
    } else if step > limit {
        Err(format!("a step ('/n') must not exceed {limit} in this field"))
    } else {
        Ok(())
    }
}

/// Adds `start..=stop` by `step` to the set, wrapping past the field's maximum as
/// Quartz does (`22-2` hours is 22, 23, 0, 1, 2; `FRI-MON` wraps the week).
fn add_range(field: CronField, set: &mut Set, start: i64, stop: i64, step: i64) -> Result<(), String> {
    let offset = if field == CronField::Year { MIN_YEAR } else { 0 };
    let (modulus, one_based) = match field {
        CronField::Seconds | CronField::Minutes => (60, false),
        CronField::Hours => (24, false),
        CronField::DayOfMonth => (31, true),
        CronField::Month => (12, true),
        CronField::DayOfWeek => (7, true),
        CronField::Year => {
            if stop < start {
                return Err("a year range must not end before it starts".to_owned());
            }
            (i64::MAX, false)
        }
    };
    let stop = if stop < start { stop + modulus } else { stop };
    let mut v = start;
    while v <= stop {
        let mut real = if v > modulus || (v == modulus && !one_based) {
            v % modulus
        } else {
            v
        };
        if one_based && real == 0 {
            real = modulus;
        }
        set.insert(real - offset);
        v += step;
    }
    Ok(())
}

fn parse_item(f: &mut Fields, field: CronField, text: &str, set: &mut Set) -> Result<(), String> {
    let (lo, hi) = bounds(field);
    let mut it = Item {
        s: text.as_bytes(),
        i: 0,
    };
    let trailing = |it: &Item<'_>| -> Result<(), String> {
        if it.at_end() {
            Ok(())
        } else {
            Err(format!("unexpected '{}'", String::from_utf8_lossy(&it.s[it.i..])))
        }
    };

    // `*`, `*/n`, and Quartz's `/n` (the same as `*/n`).
    if it.peek() == Some(b'*') || it.peek() == Some(b'/') {
        it.eat(b'*');
        let step = if it.eat(b'/') {
            let step = it.number().ok_or("'/' must be followed by a number")?;
            check_step(field, step)?;
            step
        } else {
            1
        };
        trailing(&it)?;
        return add_range(field, set, lo, hi, step);
    }

    // `L` forms.
    if it.peek() == Some(b'L') {
        it.i += 1;
        match field {
            CronField::DayOfMonth => {
                f.last_day_of_month = true;
                if it.eat(b'-') {
                    let offset = it.number().ok_or("'L-' must be followed by a number")?;
                    if offset > 30 {
                        return Err("the offset from the last day ('L-n') must be at most 30".to_owned());
                    }
                    f.last_day_offset = offset;
                }
                if it.eat(b'W') {
                    f.nearest_weekday = true;
                }
                return trailing(&it);
            }
            CronField::DayOfWeek => {
                // A lone `L` in day-of-week is Saturday, the last day of the week.
                trailing(&it)?;
                set.insert(7);
                return Ok(());
            }
            _ => return Err("'L' is only valid in day-of-month and day-of-week".to_owned()),
        }
    }

    let Some((start, named)) = it.value(field)? else {
        return Err(format!("unexpected '{text}'"));
    };
    check_value(field, start)?;

    match it.peek() {
        None => {
            set.insert(start - if field == CronField::Year { MIN_YEAR } else { 0 });
            Ok(())
        }
        Some(b'W') => {
            if field != CronField::DayOfMonth {
                return Err("'W' is only valid in day-of-month".to_owned());
            }
            it.i += 1;
            trailing(&it)?;
            f.nearest_weekday = true;
            set.insert(start);
            Ok(())
        }
        Some(b'L') => {
            if field != CronField::DayOfWeek {
                return Err("'nL' is only valid in day-of-week".to_owned());
            }
            it.i += 1;
            trailing(&it)?;
            f.last_day_of_week = true;
            set.insert(start);
            Ok(())
        }
        Some(b'#') => {
            if field != CronField::DayOfWeek {
                return Err("'#' is only valid in day-of-week".to_owned());
            }
            it.i += 1;
            let nth = it.number().filter(|n| (1..=5).contains(n));
            let Some(nth) = nth.filter(|_| it.at_end()) else {
                return Err("'#' must be followed by a number between 1 and 5".to_owned());
            };
            f.nth_day_of_week = nth;
            set.insert(start);
            Ok(())
        }
        Some(b'-') => {
            it.i += 1;
            let Some((stop, stop_named)) = it.value(field)? else {
                return Err("'-' must be followed by the end of the range".to_owned());
            };
            if stop_named != named {
                return Err("a range must use names at both ends or numbers at both ends".to_owned());
            }
            check_value(field, stop)?;
            let step = if it.eat(b'/') {
                if named {
                    return Err("a step cannot follow a range of names".to_owned());
                }
                let step = it.number().ok_or("'/' must be followed by a number")?;
                check_step(field, step)?;
                step
            } else {
                1
            };
            trailing(&it)?;
            add_range(field, set, start, stop, step)
        }
        Some(b'/') => {
            it.i += 1;
            if named {
                return Err("a step cannot follow a name".to_owned());
            }
            let step = it.number().ok_or("'/' must be followed by a number")?;
            check_step(field, step)?;
            trailing(&it)?;
            add_range(field, set, start, hi, step)
        }
        Some(_) => trailing(&it),
    }
}

/// Translates a standard 5-field Unix expression (minute hour day-of-month month
/// day-of-week, with 0 or 7 = Sunday) into Quartz syntax.
pub(crate) fn unix_to_quartz(expr: &str) -> Result<String, Error> {
    check_length(expr)?;
    let whole = |reason: &str| Error::InvalidCron {
        expr: expr.to_owned(),
        field: None,
        text: expr.to_owned(),
        reason: reason.to_owned(),
    };
    let parts: Vec<&str> = expr.split_whitespace().collect();
    let [minute, hour, dom, month, dow] = parts[..] else {
        return Err(whole(
            "a Unix expression has exactly 5 fields (minute hour day-of-month month day-of-week)",
        ));
    };
    if [minute, hour, dom, month, dow].iter().any(|p| p.contains('?')) {
        return Err(whole("'?' is not Unix cron syntax"));
    }
    // Unix fires when either day field matches if both are restricted; Quartz has
    // no such "or", so that case is refused rather than silently narrowed.
    let (dom, dow) = match (dom == "*", dow == "*") {
        (_, true) => (dom.to_owned(), "?".to_owned()),
        (true, false) => (
            "?".to_owned(),
            unix_weekdays(dow).ok_or_else(|| whole("invalid day-of-week"))?,
        ),
        (false, false) => {
            return Err(whole(
                "restricting both day-of-month and day-of-week (Unix 'or' semantics) cannot be expressed in Quartz syntax",
            ));
        }
    };
    Ok(format!("0 {minute} {hour} {dom} {month} {dow}"))
}

/// Renumbers Unix weekdays (0-7, 0 and 7 = Sunday) as Quartz's (1-7, 1 = Sunday);
/// names and steps pass through unchanged.
fn unix_weekdays(field: &str) -> Option<String> {
    let mut out = String::new();
    let mut chars = field.chars().peekable();
    let mut after_slash = false;
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() {
            let mut n = c.to_digit(10)?;
            while let Some(d) = chars.peek().and_then(|d| d.to_digit(10)) {
                // A number too long for any weekday is refused, not wrapped.
                n = n.checked_mul(10)?.checked_add(d)?;
                chars.next();
            }
            if after_slash {
                out.push_str(&n.to_string());
            } else {
                if n > 7 {
                    return None;
                }
                out.push_str(&(n % 7 + 1).to_string());
            }
            after_slash = false;
        } else {
            after_slash = c == '/';
            out.push(c);
        }
    }
    Some(out)
}

//! `Policy.spec.schedule`: weekly windows in a named time zone, checked field by field.
//! ```text
//! schedule:
//!   timeZone: Europe/Berlin          an IANA name the system's tzdata knows
//!   windows:                         1 to 64
//!     - days: [mon, tue, wed, thu, fri]
//!       from: "08:00"                local wall-clock time, HH:MM
//!       to: "17:30"                  to <= from runs past midnight
//! ```

use kudurru_core::policy::Schedule;
use kudurru_core::policy::schedule::{ScheduleError, Weekdays, Window};
use kudurru_storage::FieldError;
use serde_json::Value;

use super::{object, optional_string, strings};

/// Most windows one schedule has.
const MAX_WINDOWS: usize = 64;
/// The day names, Monday first.
const DAYS: [&str; 7] = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];

/// One checked window: its days (bit 0 = Monday) and its minutes after midnight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct CheckedWindow {
    /// Bit `i` set: day `DAYS[i]`.
    pub(super) days: u8,
    /// Start, minutes after local midnight.
    pub(super) from: u16,
    /// End, minutes after local midnight (at or before `from`: the next day).
    pub(super) to: u16,
}

/// `spec.schedule` checked and typed.
pub(super) fn schedule(value: &Value) -> Result<Schedule, FieldError> {
    let path = "spec.schedule";
    let map = object(
        value,
        path,
        &["timeZone", "windows"],
        "a schedule has timeZone and windows",
    )?;
    let Some(zone) = optional_string(map, path, "timeZone")? else {
        return Err(FieldError::new(
            "spec.schedule.timeZone",
            "a schedule needs an IANA time zone (Europe/Berlin, UTC)",
        ));
    };
    if let Err(e) = jiff::tz::TimeZone::get(zone) {
        return Err(FieldError::new(
            "spec.schedule.timeZone",
            format!("{zone:?} is not a time zone this system knows: {e}"),
        ));
    }
    let Some(windows) = map.get("windows").and_then(Value::as_array) else {
        return Err(FieldError::new(
            "spec.schedule.windows",
            "must be a list of windows {days, from, to}",
        ));
    };
    if windows.is_empty() || windows.len() > MAX_WINDOWS {
        return Err(FieldError::new(
            "spec.schedule.windows",
            format!("a schedule has 1 to {MAX_WINDOWS} windows"),
        ));
    }
    let windows = windows
        .iter()
        .enumerate()
        .map(|(i, window)| self::window(window, &format!("{path}.windows[{i}]")))
        .collect::<Result<Vec<_>, _>>()?;
    build(zone, &windows, path)
}

fn window(value: &Value, path: &str) -> Result<CheckedWindow, FieldError> {
    let map = object(
        value,
        path,
        &["days", "from", "to"],
        "a window has days, from and to",
    )?;
    let names = strings(map, path, "days")?;
    if names.is_empty() {
        return Err(FieldError::new(
            format!("{path}.days"),
            "a window needs at least one day (mon, tue, wed, thu, fri, sat, sun)",
        ));
    }
    let mut days = 0u8;
    for (i, name) in names.iter().enumerate() {
        let Some(day) = DAYS.iter().position(|d| d.eq_ignore_ascii_case(name)) else {
            return Err(FieldError::new(
                format!("{path}.days[{i}]"),
                format!("{name:?} is not one of mon, tue, wed, thu, fri, sat, sun"),
            ));
        };
        days |= 1 << day;
    }
    let time = |field: &str| -> Result<u16, FieldError> {
        let full = format!("{path}.{field}");
        let text = optional_string(map, path, field)?
            .ok_or_else(|| FieldError::new(&full, "a window needs from and to, as HH:MM"))?;
        clock_time(text).ok_or_else(|| {
            FieldError::new(
                full,
                format!("{text:?} is not a time HH:MM (00:00 to 23:59)"),
            )
        })
    };
    Ok(CheckedWindow {
        days,
        from: time("from")?,
        to: time("to")?,
    })
}

/// `HH:MM` as minutes after midnight.
fn clock_time(text: &str) -> Option<u16> {
    let (hours, minutes) = text.split_once(':')?;
    if hours.len() != 2 || minutes.len() != 2 {
        return None;
    }
    let hours: u16 = hours.parse().ok().filter(|h| *h < 24)?;
    let minutes: u16 = minutes.parse().ok().filter(|m| *m < 60)?;
    Some(hours * 60 + minutes)
}

/// The core's [`Schedule`] for a checked zone and windows (the checks above passed, so the
/// constructor's error names the schedule only if core's rules are stricter).
fn build(zone: &str, windows: &[CheckedWindow], path: &str) -> Result<Schedule, FieldError> {
    let windows = windows
        .iter()
        .map(|w| {
            let days: Vec<&str> = DAYS
                .iter()
                .enumerate()
                .filter(|(i, _)| w.days & (1 << i) != 0)
                .map(|(_, day)| *day)
                .collect();
            Ok(Window {
                days: Weekdays::parse(&days)?,
                from: w.from,
                to: w.to,
            })
        })
        .collect::<Result<Vec<_>, ScheduleError>>()
        .and_then(|windows| Schedule::new(zone, windows));
    windows.map_err(|e| FieldError::new(path, e.to_string()))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn clock_times_are_hh_mm() {
        assert_eq!(clock_time("00:00"), Some(0));
        assert_eq!(clock_time("08:30"), Some(510));
        assert_eq!(clock_time("23:59"), Some(1439));
        for bad in ["24:00", "8:30", "08:60", "0830", "08:3", "aa:bb", ""] {
            assert_eq!(clock_time(bad), None, "{bad}");
        }
    }

    #[test]
    fn windows_take_day_names_and_times() {
        let w = window(
            &json!({"days": ["mon", "Fri", "sun"], "from": "22:00", "to": "06:30"}),
            "w",
        )
        .unwrap();
        assert_eq!(
            w,
            CheckedWindow {
                days: 0b0101_0001,
                from: 1320,
                to: 390
            }
        );
    }

    #[test]
    fn every_bad_schedule_field_is_named() {
        let field = |value: Value| schedule(&value).unwrap_err().field;
        let ok_window = json!({"days": ["mon"], "from": "08:00", "to": "17:00"});
        for (value, expected) in [
            (json!("always"), "spec.schedule"),
            (json!({"windows": [ok_window]}), "spec.schedule.timeZone"),
            (
                json!({"timeZone": "Mars/Olympus", "windows": [ok_window]}),
                "spec.schedule.timeZone",
            ),
            (json!({"timeZone": "UTC"}), "spec.schedule.windows"),
            (
                json!({"timeZone": "UTC", "windows": []}),
                "spec.schedule.windows",
            ),
            (
                json!({"timeZone": "UTC", "windows": [ok_window], "zone": 1}),
                "spec.schedule.zone",
            ),
            (
                json!({"timeZone": "UTC", "windows": [ok_window, {"days": [], "from": "08:00", "to": "09:00"}]}),
                "spec.schedule.windows[1].days",
            ),
            (
                json!({"timeZone": "UTC", "windows": [{"days": ["mon", "funday"], "from": "08:00", "to": "09:00"}]}),
                "spec.schedule.windows[0].days[1]",
            ),
            (
                json!({"timeZone": "UTC", "windows": [{"days": ["mon"], "from": "8am", "to": "09:00"}]}),
                "spec.schedule.windows[0].from",
            ),
            (
                json!({"timeZone": "UTC", "windows": [{"days": ["mon"], "from": "08:00"}]}),
                "spec.schedule.windows[0].to",
            ),
            (
                json!({"timeZone": "UTC", "windows": [{"days": ["mon"], "from": "08:00", "to": "09:00", "at": 1}]}),
                "spec.schedule.windows[0].at",
            ),
        ] {
            assert_eq!(field(value.clone()), expected, "{value}");
        }
        assert!(schedule(&json!({"timeZone": "Europe/Berlin", "windows": [ok_window]})).is_ok());
    }
}

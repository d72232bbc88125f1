//! Policy schedules: weekly time windows in a named time zone (`Policy.spec.schedule`),
//! resolved on the control thread when the index is built, never on a core.
//!
//! ```text
//! schedule:
//!   timeZone: Europe/Berlin          IANA name (the system's tzdata)
//!   windows:
//!     - days: [mon, tue, wed, thu, fri]
//!       from: "08:00"                local wall-clock time
//!       to: "17:30"                  a window with to <= from runs past midnight
//! ```

//! Evaluation is on the local wall clock of each instant: a window is in effect while the
//! clock reads a time inside it, so across a DST change a window follows the clock. In a
//! spring-forward gap the skipped times never occur (a window 02:00–03:00 is not in effect
//! that night); in a fall-back overlap the repeated times occur twice (and so does the
//! window's part of them).

use jiff::civil::{Date, DateTime, Time, Weekday};
use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan};

/// Minutes in a day.
const DAY_MINUTES: u16 = 24 * 60;

/// How far [`Schedule::next_change`] looks ahead, in days.
const HORIZON_DAYS: i64 = 8;

/// Why a schedule was refused (each names the bad value).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ScheduleError {
    /// The time zone is not in the system's tzdata.
    #[error("unknown time zone `{0}`")]
    UnknownTimeZone(String),
    /// Not one of `mon` … `sun` (or the full English name).
    #[error("`{0}` is not a day (mon, tue, wed, thu, fri, sat, sun)")]
    BadDay(String),
    /// Not `HH:MM` (00:00 to 24:00).
    #[error("`{0}` is not a time of day as HH:MM")]
    BadTime(String),
    /// A window without any day.
    #[error("window {0} has no days")]
    NoDays(usize),
    /// A schedule without any window.
    #[error("a schedule needs at least one window")]
    NoWindows,
}

/// A set of weekdays, Monday bit 0 … Sunday bit 6.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Weekdays(u8);

impl Weekdays {
    /// Every day of the week.
    pub const ALL: Self = Self(0x7f);

    /// The set holding `days`, each `mon` … `sun` (or the full name), any case.
    pub fn parse<S: AsRef<str>>(days: &[S]) -> Result<Self, ScheduleError> {
        let mut set = Self::default();
        for day in days {
            set = set.with(parse_weekday(day.as_ref())?);
        }
        Ok(set)
    }

    /// The set with `day` added.
    pub fn with(self, day: Weekday) -> Self {
        Self(self.0 | 1 << (day.to_monday_zero_offset() as u8))
    }

    /// Whether `day` is in the set.
    pub fn contains(self, day: Weekday) -> bool {
        self.0 & 1 << (day.to_monday_zero_offset() as u8) != 0
    }

    /// Whether the set is empty.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
}

/// `mon` … `sun` (or `monday` … `sunday`), any case.
pub fn parse_weekday(text: &str) -> Result<Weekday, ScheduleError> {
    let lower = text.trim().to_ascii_lowercase();
    let day = match lower.as_str() {
        "mon" | "monday" => Weekday::Monday,
        "tue" | "tuesday" => Weekday::Tuesday,
        "wed" | "wednesday" => Weekday::Wednesday,
        "thu" | "thursday" => Weekday::Thursday,
        "fri" | "friday" => Weekday::Friday,
        "sat" | "saturday" => Weekday::Saturday,
        "sun" | "sunday" => Weekday::Sunday,
        _ => return Err(ScheduleError::BadDay(text.to_owned())),
    };
    Ok(day)
}

/// `HH:MM` as minutes after midnight; `24:00` is midnight (0), for a `to` at the day's end.
pub fn parse_time(text: &str) -> Result<u16, ScheduleError> {
    let bad = || ScheduleError::BadTime(text.to_owned());
    let (hours, minutes) = text.trim().split_once(':').ok_or_else(bad)?;
    if hours.is_empty() || hours.len() > 2 || minutes.len() != 2 {
        return Err(bad());
    }
    let hours: u16 = hours.parse().map_err(|_| bad())?;
    let minutes: u16 = minutes.parse().map_err(|_| bad())?;
    match (hours, minutes) {
        (24, 0) => Ok(0),
        (0..=23, 0..=59) => Ok(hours * 60 + minutes),
        _ => Err(bad()),
    }
}

/// One weekly window: on each of `days`, from `from` until `to` (minutes after local
/// midnight). A window with `to <= from` runs past midnight into the next day and belongs to
/// the day it starts on (`fri 22:00–02:00` is Friday night into Saturday); `to == from` is 24
/// hours.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Window {
    /// The days it starts on.
    pub days: Weekdays,
    /// Its start, minutes after local midnight (0..1440).
    pub from: u16,
    /// Its end, minutes after local midnight (0..1440), exclusive.
    pub to: u16,
}

impl Window {
    /// A window from its spec's strings: `days` as `mon` … `sun`, `from` and `to` as `HH:MM`.
    pub fn parse<S: AsRef<str>>(days: &[S], from: &str, to: &str) -> Result<Self, ScheduleError> {
        Ok(Self {
            days: Weekdays::parse(days)?,
            from: parse_time(from)?,
            to: parse_time(to)?,
        })
    }

    /// Whether the window is in effect at `minute` of a day that is `day`.
    fn contains(&self, day: Weekday, minute: u16) -> bool {
        if self.from < self.to {
            self.days.contains(day) && (self.from..self.to).contains(&minute)
        } else {
            (self.days.contains(day) && minute >= self.from)
                || (self.days.contains(day.wrapping_sub(1)) && minute < self.to)
        }
    }
}

/// A parsed schedule.
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    time_zone: TimeZone,
    name: String,
    windows: Vec<Window>,
}

impl Schedule {
    /// A schedule in the IANA time zone `time_zone` (from the system's tzdata; `UTC` always
    /// works) made of `windows`.
    pub fn new(time_zone: &str, windows: Vec<Window>) -> Result<Self, ScheduleError> {
        let tz = TimeZone::get(time_zone)
            .map_err(|_| ScheduleError::UnknownTimeZone(time_zone.to_owned()))?;
        if windows.is_empty() {
            return Err(ScheduleError::NoWindows);
        }
        for (i, window) in windows.iter().enumerate() {
            if window.days.is_empty() {
                return Err(ScheduleError::NoDays(i));
            }
            if window.from >= DAY_MINUTES || window.to >= DAY_MINUTES {
                return Err(ScheduleError::BadTime(format!(
                    "{} minutes",
                    window.from.max(window.to)
                )));
            }
        }
        Ok(Self {
            time_zone: tz,
            name: time_zone.to_owned(),
            windows,
        })
    }

    /// The time zone's name as written.
    pub fn time_zone(&self) -> &str {
        &self.name
    }

    /// The windows.
    pub fn windows(&self) -> &[Window] {
        &self.windows
    }

    /// Whether the schedule is in effect at `at`.
    pub fn active_at(&self, at: Timestamp) -> bool {
        let local = self.time_zone.to_datetime(at);
        let minute = local.hour() as u16 * 60 + local.minute() as u16;
        let day = local.weekday();
        self.windows.iter().any(|w| w.contains(day, minute))
    }

    /// The first instant after `at` at which [`Self::active_at`] changes (within 8 days), so
    /// the control thread knows when to rebuild the index.
    pub fn next_change(&self, at: Timestamp) -> Option<Timestamp> {
        let now = self.active_at(at);
        let horizon = at
            .checked_add(jiff::SignedDuration::from_hours(24 * HORIZON_DAYS))
            .ok()?;
        let mut candidates: Vec<Timestamp> = Vec::new();
        // The state is a function of the wall clock: it changes only where the clock reaches
        // a window's edge, or jumps over one at a UTC-offset transition.
        let today: Date = self.time_zone.to_datetime(at).date();
        for offset in -1..=HORIZON_DAYS + 1 {
            let Ok(date) = today.checked_add(offset.days()) else {
                continue;
            };
            for window in &self.windows {
                for minute in [window.from, window.to] {
                    let Ok(time) = Time::new((minute / 60) as i8, (minute % 60) as i8, 0, 0) else {
                        continue;
                    };
                    let ambiguous = self
                        .time_zone
                        .to_ambiguous_timestamp(DateTime::from_parts(date, time));
                    candidates.extend(ambiguous.earlier().ok());
                    candidates.extend(ambiguous.later().ok());
                }
            }
        }
        candidates.extend(
            self.time_zone
                .following(at)
                .take_while(|t| t.timestamp() <= horizon)
                .map(|t| t.timestamp()),
        );
        candidates.retain(|t| *t > at && *t <= horizon);
        candidates.sort_unstable();
        candidates.dedup();
        candidates.into_iter().find(|t| self.active_at(*t) != now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().expect("a test instant parses")
    }

    fn schedule(zone: &str, days: &[&str], from: &str, to: &str) -> Schedule {
        Schedule::new(zone, vec![Window::parse(days, from, to).unwrap()]).unwrap()
    }

    #[test]
    fn office_hours_in_berlin_follow_the_local_clock_in_winter_and_summer() {
        let s = schedule(
            "Europe/Berlin",
            &["mon", "tue", "wed", "thu", "fri"],
            "08:00",
            "17:30",
        );
        // Friday 2026-01-16: CET is UTC+1.
        assert!(!s.active_at(at("2026-01-16T06:59:59Z")));
        assert!(s.active_at(at("2026-01-16T07:00:00Z")));
        assert!(s.active_at(at("2026-01-16T16:29:59Z")));
        assert!(!s.active_at(at("2026-01-16T16:30:00Z")));
        // Saturday.
        assert!(!s.active_at(at("2026-01-17T10:00:00Z")));
        // Friday 2026-07-17: CEST is UTC+2.
        assert!(s.active_at(at("2026-07-17T06:00:00Z")));
        assert!(!s.active_at(at("2026-07-17T15:30:00Z")));
        assert_eq!(
            s.next_change(at("2026-01-16T12:00:00Z")),
            Some(at("2026-01-16T16:30:00Z"))
        );
        // From Friday evening the next change is Monday morning.
        assert_eq!(
            s.next_change(at("2026-01-16T18:00:00Z")),
            Some(at("2026-01-19T07:00:00Z"))
        );
    }

    #[test]
    fn berlin_spring_forward_skips_the_gap_and_the_change_is_at_the_transition() {
        // 2026-03-29 01:00 UTC: 02:00 CET becomes 03:00 CEST.
        let s = schedule("Europe/Berlin", &["sun"], "02:30", "04:00");
        assert!(!s.active_at(at("2026-03-29T00:59:59Z")), "01:59:59 CET");
        assert!(
            s.active_at(at("2026-03-29T01:00:00Z")),
            "03:00 CEST is inside the window"
        );
        assert!(!s.active_at(at("2026-03-29T02:00:00Z")), "04:00 CEST");
        assert_eq!(
            s.next_change(at("2026-03-29T00:30:00Z")),
            Some(at("2026-03-29T01:00:00Z"))
        );
        assert_eq!(
            s.next_change(at("2026-03-29T01:10:00Z")),
            Some(at("2026-03-29T02:00:00Z"))
        );
        // A window wholly inside the gap never runs that night.
        let gap = schedule("Europe/Berlin", &["sun"], "02:00", "03:00");
        assert!(!gap.active_at(at("2026-03-29T01:00:00Z")));
        assert!(!gap.active_at(at("2026-03-29T00:59:00Z")));
        assert_eq!(
            gap.next_change(at("2026-03-28T12:00:00Z")),
            Some(at("2026-04-05T00:00:00Z")),
            "the next Sunday 02:00 CEST"
        );
    }

    #[test]
    fn new_york_fall_back_runs_a_window_in_the_repeated_hour_twice() {
        // 2026-11-01 06:00 UTC: 02:00 EDT becomes 01:00 EST.
        let s = schedule("America/New_York", &["sun"], "01:00", "01:30");
        assert!(s.active_at(at("2026-11-01T05:15:00Z")), "01:15 EDT");
        assert!(!s.active_at(at("2026-11-01T05:45:00Z")), "01:45 EDT");
        assert!(s.active_at(at("2026-11-01T06:15:00Z")), "01:15 EST");
        assert!(!s.active_at(at("2026-11-01T06:30:00Z")), "01:30 EST");
        assert_eq!(
            s.next_change(at("2026-11-01T05:45:00Z")),
            Some(at("2026-11-01T06:00:00Z"))
        );
        assert_eq!(
            s.next_change(at("2026-11-01T06:10:00Z")),
            Some(at("2026-11-01T06:30:00Z"))
        );
    }

    #[test]
    fn a_window_past_midnight_belongs_to_its_start_day() {
        let s = schedule("UTC", &["fri"], "22:00", "02:00");
        assert!(s.active_at(at("2026-01-16T23:00:00Z")), "Friday night");
        assert!(s.active_at(at("2026-01-17T01:59:00Z")), "early Saturday");
        assert!(!s.active_at(at("2026-01-17T02:00:00Z")));
        assert!(
            !s.active_at(at("2026-01-16T01:00:00Z")),
            "early Friday is Thursday's night"
        );
        let always = schedule(
            "UTC",
            &["mon", "tue", "wed", "thu", "fri", "sat", "sun"],
            "00:00",
            "24:00",
        );
        assert!(always.active_at(at("2026-05-05T12:00:00Z")));
        assert_eq!(always.next_change(at("2026-05-05T12:00:00Z")), None);
    }

    #[test]
    fn bad_specs_name_the_bad_value() {
        assert_eq!(
            Schedule::new(
                "Mars/Olympus",
                vec![Window::parse(&["mon"], "08:00", "09:00").unwrap()]
            ),
            Err(ScheduleError::UnknownTimeZone("Mars/Olympus".into()))
        );
        assert_eq!(Schedule::new("UTC", vec![]), Err(ScheduleError::NoWindows));
        assert_eq!(
            Window::parse(&["mon", "funday"], "08:00", "09:00"),
            Err(ScheduleError::BadDay("funday".into()))
        );
        for bad in ["8", "25:00", "12:60", "ab:cd", "24:01", "1:2", ""] {
            assert_eq!(
                parse_time(bad),
                Err(ScheduleError::BadTime(bad.into())),
                "{bad}"
            );
        }
        assert_eq!(parse_time("7:05"), Ok(425));
        assert_eq!(parse_weekday("Sunday"), Ok(Weekday::Sunday));
        let empty = Window {
            days: Weekdays::default(),
            from: 0,
            to: 60,
        };
        assert_eq!(
            Schedule::new("UTC", vec![empty]),
            Err(ScheduleError::NoDays(0))
        );
    }
}

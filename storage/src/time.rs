//! Timestamps: Unix milliseconds inside, RFC 3339 (`2026-05-01T12:00:00Z`) in objects.

use std::fmt;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A point in time, milliseconds since the Unix epoch (UTC).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(i64);

impl Timestamp {
    /// The timestamp `millis` milliseconds after the Unix epoch.
    pub const fn from_unix_millis(millis: i64) -> Self {
        Self(millis)
    }

    /// Milliseconds since the Unix epoch.
    pub const fn unix_millis(self) -> i64 {
        self.0
    }

    /// The system clock now.
    pub fn now() -> Self {
        let millis = match SystemTime::now().duration_since(UNIX_EPOCH) {
            Ok(since) => i64::try_from(since.as_millis()).unwrap_or(i64::MAX),
            Err(before) => -i64::try_from(before.duration().as_millis()).unwrap_or(i64::MAX),
        };
        Self(millis)
    }

    /// Parses RFC 3339 in UTC (`YYYY-MM-DDTHH:MM:SS[.fff]Z`), the form [`fmt::Display`] writes.
    pub fn parse_rfc3339(text: &str) -> Option<Self> {
        let bytes = text.as_bytes();
        if bytes.len() < 20 || !matches!(bytes.last(), Some(b'Z' | b'z')) {
            return None;
        }
        let number = |range: std::ops::Range<usize>| -> Option<i64> {
            let part = text.get(range)?;
            if !part.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            part.parse().ok()
        };
        let separators = [(4, b'-'), (7, b'-'), (13, b':'), (16, b':')];
        if separators.iter().any(|&(at, byte)| bytes[at] != byte)
            || !matches!(bytes[10], b'T' | b't')
        {
            return None;
        }
        let (year, month, day) = (number(0..4)?, number(5..7)?, number(8..10)?);
        let (hour, minute, second) = (number(11..13)?, number(14..16)?, number(17..19)?);
        if !(1..=12).contains(&month)
            || !(1..=31).contains(&day)
            || hour > 23
            || minute > 59
            || second > 59
        {
            return None;
        }
        let fraction = &text[19..text.len() - 1];
        let millis = match fraction.strip_prefix('.') {
            None if fraction.is_empty() => 0,
            Some(digits) if (1..=9).contains(&digits.len()) => {
                if !digits.bytes().all(|b| b.is_ascii_digit()) {
                    return None;
                }
                let padded = format!("{digits:0<3}");
                padded[..3].parse::<i64>().ok()?
            }
            _ => return None,
        };
        let days = days_from_civil(year, month, day);
        Some(Self(
            ((days * 24 + hour) * 60 + minute) * 60_000 + second * 1000 + millis,
        ))
    }
}

impl fmt::Display for Timestamp {
    /// RFC 3339 in UTC, with milliseconds only when there are any (`…:07Z`, `…:07.250Z`), so
    /// a time survives a round trip through any driver unchanged.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let seconds = self.0.div_euclid(1000);
        let millis = self.0.rem_euclid(1000);
        let (days, in_day) = (seconds.div_euclid(86_400), seconds.rem_euclid(86_400));
        let (year, month, day) = civil_from_days(days);
        write!(
            f,
            "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}",
            in_day / 3600,
            in_day % 3600 / 60,
            in_day % 60
        )?;
        if millis != 0 {
            write!(f, ".{millis:03}")?;
        }
        f.write_str("Z")
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Self::parse_rfc3339(&text)
            .ok_or_else(|| serde::de::Error::custom(format!("not an RFC 3339 time: {text:?}")))
    }
}

/// Where a store reads the time: the system clock, or a test's own.
pub type Clock = Arc<dyn Fn() -> Timestamp + Send + Sync>;

/// The system clock as a [`Clock`].
pub fn system_clock() -> Clock {
    Arc::new(Timestamp::now)
}

// Howard Hinnant's days_from_civil / civil_from_days (proleptic Gregorian, days since 1970-01-01).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let days = days + 719_468;
    let era = days.div_euclid(146_097);
    let day_of_era = days - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_round_trips_to_the_millisecond() {
        let time = Timestamp::from_unix_millis(1_700_000_000_250);
        assert_eq!(time.to_string(), "2023-11-14T22:13:20.250Z");
        assert_eq!(Timestamp::parse_rfc3339(&time.to_string()), Some(time));
        let time = Timestamp::parse_rfc3339("2026-02-28T23:59:07Z").unwrap();
        assert_eq!(time.to_string(), "2026-02-28T23:59:07Z");
        assert_eq!(
            Timestamp::from_unix_millis(0).to_string(),
            "1970-01-01T00:00:00Z"
        );
        assert_eq!(
            Timestamp::parse_rfc3339("2000-03-01T00:00:00.250Z").map(Timestamp::unix_millis),
            Some(951_868_800_250)
        );
    }

    #[test]
    fn rfc3339_rejects_other_shapes() {
        for bad in [
            "",
            "2026-02-28",
            "2026-13-01T00:00:00Z",
            "2026-02-28T00:00:00+01:00",
        ] {
            assert_eq!(Timestamp::parse_rfc3339(bad), None, "{bad}");
        }
    }
}

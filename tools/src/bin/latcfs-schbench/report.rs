//! schbench's text tables and JSON output.

use std::fmt::Write as _;

use crate::hist::{Hist, PERCENTILES};

/// Rows of `PERCENTILES` a table prints, and which one gets the star.
#[derive(Debug, Clone, Copy)]
pub struct Rows {
    pub show: &'static [usize],
    pub star: usize,
}

/// Latency tables: 50, 90, *99, 99.9.
pub const LAT_ROWS: Rows = Rows {
    show: &[1, 2, 3, 4],
    star: 3,
};
/// Pipe mode's wakeup table adds the 20th.
pub const PIPE_ROWS: Rows = Rows {
    show: &[0, 1, 2, 3, 4],
    star: 3,
};
/// RPS table: 20, *50, 90.
pub const RPS_ROWS: Rows = Rows {
    show: &[0, 1, 2],
    star: 1,
};

/// One table in schbench's layout (rows start with a tab), e.g.
///
/// ```text
/// Wakeup Latencies percentiles (usec) runtime 30 (s) (12345 total samples)
///       50.0th: 12         (3456 samples)
///     * 99.0th: 50         (400 samples)
///       min=1, max=2000
/// ```
///
/// The sample count of a row is the number of samples between the previous
/// percentile of 20/50/90/99/99.9 (printed or not) and this one.
pub fn table(label: &str, units: &str, runtime_s: u64, h: &Hist, rows: Rows) -> String {
    let mut s = format!(
        "{label} percentiles ({units}) runtime {runtime_s} (s) ({} total samples)\n",
        h.count()
    );
    let pcts = h.percentiles(&PERCENTILES);
    for &i in rows.show {
        let mark = if i == rows.star { "* " } else { "  " };
        let _ = writeln!(
            s,
            "\t{mark}{:.1}th: {:<10} ({} samples)",
            PERCENTILES[i], pcts[i].value, pcts[i].band
        );
    }
    let _ = writeln!(s, "\t  min={}, max={}", h.min(), h.max());
    s
}

/// "1.34GB" style: divide by 1024 until under 1024.
pub fn pretty_size(mut v: f64) -> (f64, &'static str) {
    const UNITS: [&str; 7] = ["B", "KB", "MB", "GB", "TB", "PB", "EB"];
    let mut i = 0;
    while v >= 1024.0 && i + 1 < UNITS.len() {
        v /= 1024.0;
        i += 1;
    }
    (v, UNITS[i])
}

/// A JSON value, enough for our output.
#[derive(Debug, Clone)]
pub enum Json {
    Str(String),
    Int(u64),
    Num(f64),
    Bool(bool),
    Obj(Vec<(String, Json)>),
}

impl Json {
    pub fn obj<K: Into<String>>(fields: impl IntoIterator<Item = (K, Json)>) -> Json {
        Json::Obj(fields.into_iter().map(|(k, v)| (k.into(), v)).collect())
    }

    pub fn render(&self) -> String {
        let mut s = String::new();
        self.write(&mut s, 0);
        s
    }

    fn write(&self, out: &mut String, depth: usize) {
        match self {
            Json::Str(v) => write_str(out, v),
            Json::Int(v) => {
                let _ = write!(out, "{v}");
            }
            Json::Num(v) if v.is_finite() => {
                let _ = write!(out, "{v:.2}");
            }
            Json::Num(_) => out.push('0'),
            Json::Bool(v) => {
                let _ = write!(out, "{v}");
            }
            Json::Obj(fields) => {
                out.push('{');
                for (i, (k, v)) in fields.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push('\n');
                    out.push_str(&"  ".repeat(depth + 1));
                    write_str(out, k);
                    out.push_str(": ");
                    v.write(out, depth + 1);
                }
                if !fields.is_empty() {
                    out.push('\n');
                    out.push_str(&"  ".repeat(depth));
                }
                out.push('}');
            }
        }
    }
}

fn write_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// schbench's flat keys for one histogram: LABEL_pct20.0 .. LABEL_pct99.9,
/// LABEL_min, LABEL_max (plus LABEL_samples, which schbench lacks).
pub fn flat_fields(label: &str, h: &Hist) -> Vec<(String, Json)> {
    let pcts = h.percentiles(&PERCENTILES);
    let mut v: Vec<(String, Json)> = PERCENTILES
        .iter()
        .zip(&pcts)
        .map(|(p, x)| (format!("{label}_pct{p:.1}"), Json::Int(x.value)))
        .collect();
    v.push((format!("{label}_min"), Json::Int(h.min())));
    v.push((format!("{label}_max"), Json::Int(h.max())));
    v.push((format!("{label}_samples"), Json::Int(h.count())));
    v
}

/// A histogram's printed rows as an object: {"p50": .., "p99.9": ..,
/// "min": .., "max": .., "samples": ..}.
pub fn summary(h: &Hist, rows: Rows) -> Json {
    let pcts = h.percentiles(&PERCENTILES);
    let mut v: Vec<(String, Json)> = rows
        .show
        .iter()
        .map(|&i| {
            let p = PERCENTILES[i];
            let key = if p.fract() == 0.0 {
                format!("p{p:.0}")
            } else {
                format!("p{p}")
            };
            (key, Json::Int(pcts[i].value))
        })
        .collect();
    v.push(("min".into(), Json::Int(h.min())));
    v.push(("max".into(), Json::Int(h.max())));
    v.push(("samples".into(), Json::Int(h.count())));
    Json::Obj(v)
}

/// Kernel release and node name from uname(2).
pub fn uname() -> (String, String) {
    // SAFETY: utsname is plain bytes; uname fills it (NUL-terminated fields).
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    if unsafe { libc::uname(&mut u) } != 0 {
        return (String::new(), String::new());
    }
    let field = |f: &[libc::c_char]| {
        let bytes: Vec<u8> = f
            .iter()
            .take_while(|c| **c != 0)
            .map(|c| *c as u8)
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    (field(&u.release), field(&u.nodename))
}

/// The attached sched_ext scheduler's name, or "disabled".
pub fn sched_ext() -> String {
    let read = |p: &str| std::fs::read_to_string(p).map(|s| s.trim().to_string());
    match read("/sys/kernel/sched_ext/state") {
        Ok(state) if state == "enabled" => read("/sys/kernel/sched_ext/root/ops")
            .ok()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "enabled".into()),
        _ => "disabled".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_layout() {
        let mut h = Hist::default();
        for v in 1..=100 {
            h.record(v);
        }
        let t = table("Wakeup Latencies", "usec", 30, &h, LAT_ROWS);
        assert_eq!(
            t,
            "Wakeup Latencies percentiles (usec) runtime 30 (s) (100 total samples)\n\
             \t  50.0th: 50         (30 samples)\n\
             \t  90.0th: 90         (40 samples)\n\
             \t* 99.0th: 99         (9 samples)\n\
             \t  99.9th: 100        (1 samples)\n\
             \t  min=1, max=100\n"
        );
        let r = table("RPS", "requests", 5, &h, RPS_ROWS);
        assert!(r.starts_with("RPS percentiles (requests) runtime 5 (s) (100 total samples)\n"));
        assert!(r.contains("\t  20.0th: 20         (20 samples)\n"));
        assert!(r.contains("\t* 50.0th: 50         (30 samples)\n"));
        assert!(!r.contains("99.0th"));
    }

    #[test]
    fn empty_table() {
        let t = table("Request Latencies", "usec", 1, &Hist::default(), LAT_ROWS);
        assert!(t.contains("(0 total samples)"));
        assert!(t.contains("\t* 99.0th: 0          (0 samples)\n"));
        assert!(t.ends_with("\t  min=0, max=0\n"));
    }

    #[test]
    fn json_rendering() {
        let mut h = Hist::default();
        h.record(7);
        let j = Json::obj([
            ("s", Json::Str("a\"b\\c\n".into())),
            ("n", Json::Num(1.5)),
            ("bad", Json::Num(f64::NAN)),
            ("b", Json::Bool(true)),
            ("h", summary(&h, LAT_ROWS)),
            ("e", Json::obj(Vec::<(String, Json)>::new())),
        ]);
        let s = j.render();
        assert!(s.contains(r#""s": "a\"b\\c\n""#));
        assert!(s.contains(r#""n": 1.50"#));
        assert!(s.contains(r#""bad": 0"#));
        assert!(s.contains(r#""p99.9": 7"#));
        assert!(s.contains(r#""p50": 7"#));
        assert!(s.contains(r#""samples": 1"#));
        assert!(s.contains(r#""e": {}"#));
        let flat = flat_fields("wakeup_latency", &h);
        assert_eq!(flat[0].0, "wakeup_latency_pct20.0");
        assert_eq!(flat[4].0, "wakeup_latency_pct99.9");
    }

    #[test]
    fn sizes() {
        assert_eq!(pretty_size(512.0), (512.0, "B"));
        assert_eq!(pretty_size(1536.0), (1.5, "KB"));
        assert_eq!(pretty_size(3.0 * 1024.0 * 1024.0 * 1024.0), (3.0, "GB"));
    }
}

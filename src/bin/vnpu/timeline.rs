//! `vnpu trace FILE.json -o timeline.svg`: draws a Chrome/Perfetto trace of the scheduler
//! as an SVG picture: one lane per core and one for the CPU pool, FCs coloured by model,
//! priority-255 work outlined in red with a marker where it started (the preemption
//! points), and a time axis.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde_json::Value as Json;

/// One complete slice ("ph":"X") of the trace.
struct Slice {
    lane: (i64, i64),
    name: String,
    model: String,
    priority: i64,
    start_us: f64,
    dur_us: f64,
}

const PALETTE: [&str; 10] = [
    "#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2", "#edc948", "#ff9da7", "#9c755f",
    "#bab0ac", "#e15759",
];

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Renders trace JSON text as SVG.
pub fn render(trace_json: &str) -> Result<String, String> {
    let root: Json =
        serde_json::from_str(trace_json).map_err(|e| format!("not a JSON trace: {e}"))?;
    let events = root
        .get("traceEvents")
        .and_then(|v| v.as_array())
        .or_else(|| root.as_array())
        .ok_or("no traceEvents array in the trace")?;
    let mut lane_names: BTreeMap<(i64, i64), String> = BTreeMap::new();
    let mut slices = Vec::new();
    for e in events {
        let pid = e.get("pid").and_then(|v| v.as_i64()).unwrap_or(0);
        let tid = e.get("tid").and_then(|v| v.as_i64()).unwrap_or(0);
        match e.get("ph").and_then(|v| v.as_str()) {
            Some("M") if e.get("name").and_then(|v| v.as_str()) == Some("thread_name") => {
                if let Some(n) = e.pointer("/args/name").and_then(|v| v.as_str()) {
                    lane_names.insert((pid, tid), n.to_string());
                }
            }
            Some("X") => {
                let args = e.get("args");
                let get_str = |k: &str| {
                    args.and_then(|a| a.get(k))
                        .and_then(|v| v.as_str())
                        .map(|s| s.to_string())
                };
                let name = e
                    .get("name")
                    .and_then(|v| v.as_str())
                    .unwrap_or("")
                    .to_string();
                slices.push(Slice {
                    lane: (pid, tid),
                    model: get_str("model").unwrap_or_else(|| name.clone()),
                    name,
                    priority: args
                        .and_then(|a| a.get("priority"))
                        .and_then(|v| v.as_i64())
                        .unwrap_or(0),
                    start_us: e.get("ts").and_then(|v| v.as_f64()).unwrap_or(0.0),
                    dur_us: e.get("dur").and_then(|v| v.as_f64()).unwrap_or(0.0),
                });
                lane_names
                    .entry((pid, tid))
                    .or_insert_with(|| format!("thread {tid}"));
            }
            _ => {}
        }
    }
    if slices.is_empty() {
        return Err("the trace holds no complete events (ph \"X\"); was tracing on?".into());
    }
    let t0 = slices
        .iter()
        .map(|s| s.start_us)
        .fold(f64::INFINITY, f64::min);
    let t1 = slices
        .iter()
        .map(|s| s.start_us + s.dur_us)
        .fold(f64::NEG_INFINITY, f64::max);
    let span = (t1 - t0).max(1.0);
    let lanes: Vec<(i64, i64)> = lane_names.keys().copied().collect();
    let mut models: Vec<String> = slices.iter().map(|s| s.model.clone()).collect();
    models.sort();
    models.dedup();
    let colour = |m: &str| PALETTE[models.iter().position(|x| x == m).unwrap_or(0) % PALETTE.len()];

    let (left, top, lane_h, width) = (150.0, 40.0, 44.0, 1400.0);
    let plot_w = width - left - 20.0;
    let legend_h = 24.0 * ((models.len() as f64 / 4.0).ceil() + 1.0);
    let height = top + lane_h * lanes.len() as f64 + 50.0 + legend_h;
    let x = |t: f64| left + (t - t0) / span * plot_w;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        s,
        r#"<rect x="0" y="0" width="{width}" height="{height}" fill="white"/>"#
    );
    let _ = writeln!(
        s,
        r#"<text x="10" y="22" font-size="15" font-weight="bold">vnpu schedule ({:.1} ms)</text>"#,
        span / 1000.0
    );
    for (i, lane) in lanes.iter().enumerate() {
        let y = top + lane_h * i as f64;
        let fill = if i % 2 == 0 { "#f4f4f4" } else { "#ffffff" };
        let _ = writeln!(
            s,
            r#"<g class="lane" data-lane="{}"><rect x="{left}" y="{y}" width="{plot_w}" height="{lane_h}" fill="{fill}"/><text x="10" y="{}">{}</text></g>"#,
            escape(&lane_names[lane]),
            y + lane_h / 2.0 + 4.0,
            escape(&lane_names[lane])
        );
    }
    for sl in &slices {
        let li = lanes.iter().position(|l| *l == sl.lane).unwrap_or(0);
        let y = top + lane_h * li as f64 + 6.0;
        let w = (sl.dur_us / span * plot_w).max(0.8);
        let hi = sl.priority >= 255;
        let stroke = if hi {
            r##" stroke="#d00000" stroke-width="2""##
        } else {
            ""
        };
        let _ = writeln!(
            s,
            r#"<rect x="{:.2}" y="{y}" width="{w:.2}" height="{}" fill="{}"{stroke}><title>{} ({}) prio {} {:.0} us</title></rect>"#,
            x(sl.start_us),
            lane_h - 12.0,
            colour(&sl.model),
            escape(&sl.name),
            escape(&sl.model),
            sl.priority,
            sl.dur_us
        );
        if hi {
            let px = x(sl.start_us);
            let _ = writeln!(
                s,
                r##"<path d="M{px:.2},{} l-4,-6 l8,0 z" fill="#d00000"><title>priority-255 FC starts</title></path>"##,
                y - 1.0
            );
        }
    }
    let axis_y = top + lane_h * lanes.len() as f64 + 8.0;
    let _ = writeln!(
        s,
        r#"<line x1="{left}" y1="{axis_y}" x2="{}" y2="{axis_y}" stroke="black"/>"#,
        left + plot_w
    );
    let step_ms = nice_step(span / 1000.0 / 10.0);
    let mut t = 0.0;
    while t <= span / 1000.0 + 1e-9 {
        let px = x(t0 + t * 1000.0);
        let _ = writeln!(
            s,
            r#"<line x1="{px:.2}" y1="{axis_y}" x2="{px:.2}" y2="{}" stroke="black"/><text x="{px:.2}" y="{}" text-anchor="middle">{} ms</text>"#,
            axis_y + 5.0,
            axis_y + 18.0,
            trim(t)
        );
        t += step_ms;
    }
    let ly = axis_y + 40.0;
    for (i, m) in models.iter().enumerate() {
        let lx = left + (i % 4) as f64 * 300.0;
        let yy = ly + (i / 4) as f64 * 24.0;
        let _ = writeln!(
            s,
            r#"<rect x="{lx}" y="{}" width="14" height="14" fill="{}"/><text x="{}" y="{}">{}</text>"#,
            yy - 11.0,
            colour(m),
            lx + 20.0,
            yy,
            escape(m)
        );
    }
    let hy = ly + 24.0 * ((models.len() as f64 / 4.0).ceil());
    let _ = writeln!(
        s,
        r##"<rect x="{left}" y="{}" width="14" height="14" fill="none" stroke="#d00000" stroke-width="2"/><text x="{}" y="{hy}">priority 255 (marker = start / preemption point)</text>"##,
        hy - 11.0,
        left + 20.0
    );
    s.push_str("</svg>\n");
    Ok(s)
}

fn nice_step(raw: f64) -> f64 {
    let raw = raw.max(1e-3);
    let p = 10f64.powf(raw.log10().floor());
    for m in [1.0, 2.0, 5.0, 10.0] {
        if raw <= m * p {
            return m * p;
        }
    }
    10.0 * p
}

fn trim(t: f64) -> String {
    let s = format!("{t:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// `vnpu trace FILE.json -o timeline.svg`
pub fn run_trace(argv: &[String]) -> Result<(), String> {
    let a = crate::args::Args::parse(argv, &["o", "output"], &[])?;
    let input = a
        .positional
        .first()
        .ok_or("usage: vnpu trace TRACE.json -o timeline.svg")?;
    let out = a
        .get("o")
        .or(a.get("output"))
        .map(|s| s.to_string())
        .unwrap_or_else(|| format!("{input}.svg"));
    let text = std::fs::read_to_string(input).map_err(|e| format!("cannot open {input}: {e}"))?;
    let svg = render(&text)?;
    std::fs::write(&out, svg).map_err(|e| format!("cannot write {out}: {e}"))?;
    eprintln!("wrote {out}");
    Ok(())
}

//! `vnpu trace FILE.json -o timeline.svg`: draws a Chrome/Perfetto trace of the scheduler
//! as an SVG picture: one lane per core and one for the CPU pool, FCs coloured by model,
//! priority-255 work outlined in red with a marker where it started (the preemption
//! points), and a time axis.
//!
//! Without an explicit window the picture is centred on an *overtaking*: the start of a
//! priority-255 FC while background (lower-priority) tasks submitted before it are waiting
//! with FCs still to run; the moment is marked and labelled. The pick: among priority-255
//! FC starts, the one with the most such waiting background tasks (earliest on ties).

use std::collections::BTreeMap;
use std::fmt::Write;

use serde_json::Value as Json;

/// One complete slice ("ph":"X") of the trace.
struct Slice {
    lane: (i64, i64),
    task: Option<i64>,
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

/// Length of the window centred on an overtaking.
const OVERTAKE_WINDOW_US: f64 = 20_000.0;

/// A task's life from the trace's instant events.
struct TaskLife {
    priority: i64,
    model: String,
    submit: Option<f64>,
    done: Option<f64>,
}

/// A priority-255 FC starting while earlier-submitted background tasks wait.
pub struct Overtake {
    /// When the FC starts (trace µs).
    pub at_us: f64,
    /// The overtaking task.
    pub task: i64,
    /// Its priority.
    pub priority: i64,
    /// Its model.
    pub model: String,
    /// Background tasks submitted before it, unfinished and not running at that moment.
    pub waiting: Vec<i64>,
    /// The FC starts where a background FC ended on the same core.
    pub at_boundary: bool,
}

/// How close (µs) a priority-255 FC start must follow a background FC's end on the same
/// core to count as taking over that core at the FC boundary.
const BOUNDARY_SLACK_US: f64 = 200.0;

/// Picks the priority-255 FC start with the most waiting earlier-submitted background
/// tasks (see the module doc); `None` when no such moment is in the trace.
fn find_overtake(slices: &[Slice], tasks: &BTreeMap<i64, TaskLife>) -> Option<Overtake> {
    let mut busy: BTreeMap<i64, Vec<(f64, f64)>> = BTreeMap::new();
    for s in slices {
        if let Some(t) = s.task {
            busy.entry(t)
                .or_default()
                .push((s.start_us, s.start_us + s.dur_us));
        }
    }
    let mut best: Option<Overtake> = None;
    for hi in slices.iter().filter(|s| s.priority >= 255) {
        let Some(hi_task) = hi.task else { continue };
        let Some(hi_submit) = tasks.get(&hi_task).and_then(|t| t.submit) else {
            continue;
        };
        let t = hi.start_us;
        let waiting: Vec<i64> = tasks
            .iter()
            .filter(|(_, l)| l.priority < 255)
            .filter(|(_, l)| l.submit.is_some_and(|s| s < hi_submit))
            .filter(|(_, l)| l.done.is_some_and(|d| d > t))
            .filter(|(id, _)| {
                !busy
                    .get(id)
                    .is_some_and(|v| v.iter().any(|&(a, b)| a <= t && b > t))
            })
            .map(|(id, _)| *id)
            .collect();
        // Prefer a start right at a background FC's end on the same core (the core went
        // from background work straight to the priority-255 FC), then more waiting tasks.
        let at_boundary = slices.iter().any(|s| {
            s.lane == hi.lane
                && s.priority < 255
                && (t - (s.start_us + s.dur_us)).abs() <= BOUNDARY_SLACK_US
        });
        let score = (at_boundary, waiting.len());
        if waiting.is_empty()
            || best
                .as_ref()
                .is_some_and(|b| (b.at_boundary, b.waiting.len()) >= score)
        {
            continue;
        }
        best = Some(Overtake {
            at_us: t,
            task: hi_task,
            priority: hi.priority,
            model: hi.model.clone(),
            waiting,
            at_boundary,
        });
    }
    best
}

/// Most slices drawn before the picture zooms into a window by itself.
const AUTO_WINDOW_SLICES: usize = 1500;
/// Length of the automatic window.
const AUTO_WINDOW_US: f64 = 40_000.0;

/// Renders trace JSON text as SVG. `window_ms` limits the picture to `[from, to)` ms after
/// the first event; without it, the picture is a 20 ms window centred on an overtaking
/// (module doc), else a long trace is shown as a 40 ms window around the third
/// priority-255 FC; the title says which window. Also returns the overtaking moment drawn
/// (ms after the first event) and its label.
pub fn render(
    trace_json: &str,
    window_ms: Option<(f64, f64)>,
) -> Result<(String, Option<(f64, String)>), String> {
    let root: Json =
        serde_json::from_str(trace_json).map_err(|e| format!("not a JSON trace: {e}"))?;
    let events = root
        .get("traceEvents")
        .and_then(|v| v.as_array())
        .or_else(|| root.as_array())
        .ok_or("no traceEvents array in the trace")?;
    let mut lane_names: BTreeMap<(i64, i64), String> = BTreeMap::new();
    let mut slices: Vec<Slice> = Vec::new();
    let mut tasks: BTreeMap<i64, TaskLife> = BTreeMap::new();
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
                    task: args.and_then(|a| a.get("task")).and_then(|v| v.as_i64()),
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
            Some("i") | Some("I") => {
                let args = e.get("args");
                let (Some(task), Some(ts)) = (
                    args.and_then(|a| a.get("task")).and_then(|v| v.as_i64()),
                    e.get("ts").and_then(|v| v.as_f64()),
                ) else {
                    continue;
                };
                let name = e.get("name").and_then(|v| v.as_str()).unwrap_or("");
                let life = tasks.entry(task).or_insert(TaskLife {
                    priority: 0,
                    model: String::new(),
                    submit: None,
                    done: None,
                });
                if let Some(p) = args
                    .and_then(|a| a.get("priority"))
                    .and_then(|v| v.as_i64())
                {
                    life.priority = p;
                }
                if let Some(m) = args.and_then(|a| a.get("model")).and_then(|v| v.as_str()) {
                    life.model = m.to_string();
                }
                if name.starts_with("submit") {
                    life.submit = Some(ts);
                } else if name.starts_with("done") {
                    life.done = Some(ts);
                }
            }
            _ => {}
        }
    }
    if slices.is_empty() {
        return Err("the trace holds no complete events (ph \"X\"); was tracing on?".into());
    }
    let first = slices
        .iter()
        .map(|s| s.start_us)
        .fold(f64::INFINITY, f64::min);
    let mut note = String::new();
    let overtake = find_overtake(&slices, &tasks);
    let window = match window_ms {
        Some((a, b)) if b > a => Some((first + a * 1000.0, first + b * 1000.0)),
        Some((a, b)) => return Err(format!("empty window {a}..{b} ms")),
        None if overtake.is_some() => {
            let o = overtake.as_ref().map(|o| o.at_us).unwrap_or(first);
            let a = (o - OVERTAKE_WINDOW_US / 2.0).max(first);
            Some((a, a + OVERTAKE_WINDOW_US))
        }
        None if slices.len() > AUTO_WINDOW_SLICES => {
            let mut hi: Vec<f64> = slices
                .iter()
                .filter(|s| s.priority >= 255)
                .map(|s| s.start_us)
                .collect();
            hi.sort_by(|a, b| a.total_cmp(b));
            let anchor = hi.get(2).or(hi.first()).copied().unwrap_or(first);
            let a = (anchor - 5_000.0).max(first);
            Some((a, a + AUTO_WINDOW_US))
        }
        None => None,
    };
    if let Some((a, b)) = window {
        slices.retain(|s| s.start_us < b && s.start_us + s.dur_us > a);
        for s in &mut slices {
            let end = (s.start_us + s.dur_us).min(b);
            s.start_us = s.start_us.max(a);
            s.dur_us = end - s.start_us;
        }
        note = format!(
            ", window {:.1}..{:.1} ms of the trace",
            (a - first) / 1000.0,
            (b - first) / 1000.0
        );
        if slices.is_empty() {
            return Err("no event in the requested window".into());
        }
    }
    let t0 = window.map(|w| w.0).unwrap_or(first);
    let t1 = window.map(|w| w.1).unwrap_or_else(|| {
        slices
            .iter()
            .map(|s| s.start_us + s.dur_us)
            .fold(f64::NEG_INFINITY, f64::max)
    });
    let span = (t1 - t0).max(1.0);
    let lanes: Vec<(i64, i64)> = lane_names.keys().copied().collect();
    let mut models: Vec<String> = slices.iter().map(|s| s.model.clone()).collect();
    models.sort();
    models.dedup();
    let colour = |m: &str| PALETTE[models.iter().position(|x| x == m).unwrap_or(0) % PALETTE.len()];

    // A second title line carries the overtaking's label when there is one.
    let top = if overtake
        .as_ref()
        .is_some_and(|o| o.at_us >= t0 && o.at_us <= t1)
    {
        62.0
    } else {
        40.0
    };
    let (left, lane_h, width) = (150.0, 44.0, 1400.0);
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
        r#"<text x="10" y="22" font-size="15" font-weight="bold">vnpu schedule ({:.1} ms{note})</text>"#,
        span / 1000.0
    );
    let overtake_label = overtake.as_ref().filter(|o| o.at_us >= t0 && o.at_us <= t1).map(|o| {
        format!(
            "priority-{} FC of '{}' (task {}) starts{} while {} background task(s) submitted before it wait with FCs queued (tasks {})",
            o.priority,
            o.model,
            o.task,
            if o.at_boundary {
                " at a background FC boundary"
            } else {
                ""
            },
            o.waiting.len(),
            o.waiting
                .iter()
                .map(|t| t.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )
    });
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
            r##" stroke="#ffffff" stroke-width="0.6""##
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
    if let (Some(o), Some(label)) = (overtake.as_ref(), overtake_label.as_ref()) {
        let px = x(o.at_us);
        let y_end = top + lane_h * lanes.len() as f64;
        let _ = writeln!(
            s,
            r##"<g class="overtake" data-task="{}" data-at-ms="{:.3}"><line x1="{px:.2}" y1="{}" x2="{px:.2}" y2="{y_end}" stroke="#d00000" stroke-width="1.5" stroke-dasharray="5,3"/><text x="10" y="{}" fill="#d00000" font-weight="bold">&#9660; {:.3} ms: {}</text></g>"##,
            o.task,
            (o.at_us - first) / 1000.0,
            top - 12.0,
            top - 16.0,
            (o.at_us - first) / 1000.0,
            escape(label)
        );
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
    let drawn = overtake
        .zip(overtake_label)
        .map(|(o, label)| ((o.at_us - first) / 1000.0, label));
    Ok((s, drawn))
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
    let a = crate::args::Args::parse(argv, &["o", "output", "from_ms", "to_ms"], &[])?;
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
    let window = match (a.num::<f64>("from_ms")?, a.num::<f64>("to_ms")?) {
        (None, None) => None,
        (f, t) => Some((f.unwrap_or(0.0), t.unwrap_or(f64::MAX / 4.0))),
    };
    let (svg, overtake) = render(&text, window)?;
    std::fs::write(&out, svg).map_err(|e| format!("cannot write {out}: {e}"))?;
    match overtake {
        Some((ms, label)) => println!("wrote {out}: centred on {ms:.3} ms: {label}"),
        None => println!("wrote {out}"),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Background task 1 runs FCs on core 0 back to back, background task 2 waits for a
    /// core, then priority-255 task 3 (submitted at 500 us) takes core 0 at 1000 us.
    fn trace() -> String {
        let fc = |task: i64, prio: i64, tid: i64, ts: f64| {
            format!(
                r#"{{"ph":"X","pid":1,"tid":{tid},"ts":{ts},"dur":1000,"name":"m{task} fc","args":{{"task":{task},"priority":{prio},"model":"m{task}"}}}}"#
            )
        };
        let inst = |what: &str, task: i64, prio: i64, ts: f64| {
            format!(
                r#"{{"ph":"i","pid":1,"tid":0,"ts":{ts},"name":"{what} m{task}","args":{{"task":{task},"priority":{prio},"model":"m{task}"}}}}"#
            )
        };
        let ev = [
            r#"{"ph":"M","pid":1,"tid":2,"name":"thread_name","args":{"name":"core 0"}}"#.into(),
            inst("submit", 1, 0, 0.0),
            inst("submit", 2, 0, 10.0),
            fc(1, 0, 2, 0.0),
            inst("submit", 3, 255, 500.0),
            fc(3, 255, 2, 1000.0),
            inst("done", 3, 255, 2000.0),
            fc(1, 0, 2, 2000.0),
            inst("done", 1, 0, 3000.0),
            fc(2, 0, 2, 3000.0),
            inst("done", 2, 0, 4000.0),
        ];
        format!(r#"{{"traceEvents":[{}]}}"#, ev.join(","))
    }

    #[test]
    fn default_window_is_centred_on_the_overtaking_and_labels_it() {
        let (svg, o) = render(&trace(), None).unwrap();
        let (ms, label) = o.expect("an overtaking");
        assert!((ms - 1.0).abs() < 1e-9, "{ms}");
        assert!(label.contains("task 3") && label.contains("at a background FC boundary"));
        assert!(
            label.contains("2 background task(s)") && label.contains("tasks 1, 2"),
            "{label}"
        );
        assert!(svg.contains(r#"class="overtake" data-task="3""#), "{svg}");
        roxmltree::Document::parse(&svg).unwrap();
    }

    #[test]
    fn no_overtaking_without_earlier_background_work() {
        let t = trace().replace(
            r#""ts":500,"name":"submit m3""#,
            r#""ts":-5,"name":"submit m3""#,
        );
        let (_, o) = render(&t, None).unwrap();
        assert!(
            o.is_none(),
            "background tasks were submitted after the high one"
        );
        let (svg, o) = render(&trace(), Some((2.5, 4.0))).unwrap();
        assert!(
            o.is_none() && !svg.contains("overtake"),
            "outside the chosen window"
        );
    }
}

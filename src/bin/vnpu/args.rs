//! A small command-line parser: positionals plus `--flag value` / `--flag=value` /
//! boolean `--flag`, with the value-taking flags declared by each subcommand.

use std::collections::HashMap;

/// Parsed arguments of one subcommand.
pub struct Args {
    /// Positional arguments in order.
    pub positional: Vec<String>,
    values: HashMap<String, Vec<String>>,
    switches: Vec<String>,
}

impl Args {
    /// Parses `argv` (after the subcommand). `valued` lists flags that take a value,
    /// `switches` the boolean ones; anything else starting with `-` is an error.
    pub fn parse(argv: &[String], valued: &[&str], switches: &[&str]) -> Result<Args, String> {
        let mut a = Args {
            positional: Vec::new(),
            values: HashMap::new(),
            switches: Vec::new(),
        };
        let mut i = 0;
        while i < argv.len() {
            let arg = &argv[i];
            if arg.starts_with('-') && arg.len() > 1 && arg.parse::<f64>().is_err() {
                let (name, inline) = match arg.split_once('=') {
                    Some((n, v)) => (n.to_string(), Some(v.to_string())),
                    None => (arg.clone(), None),
                };
                let key = name.trim_start_matches('-').replace('-', "_");
                if valued.contains(&key.as_str()) {
                    let v = match inline {
                        Some(v) => v,
                        None => {
                            i += 1;
                            argv.get(i)
                                .cloned()
                                .ok_or_else(|| format!("{name} needs a value"))?
                        }
                    };
                    a.values.entry(key).or_default().push(v);
                } else if switches.contains(&key.as_str()) && inline.is_none() {
                    a.switches.push(key);
                } else {
                    return Err(format!("unknown option {name}"));
                }
            } else {
                a.positional.push(arg.clone());
            }
            i += 1;
        }
        Ok(a)
    }

    /// The last value of a flag (`--max-time-per-fc` is looked up as `max_time_per_fc`).
    pub fn get(&self, key: &str) -> Option<&str> {
        self.values
            .get(key)
            .and_then(|v| v.last())
            .map(|s| s.as_str())
    }

    /// Every value of a repeatable flag.
    pub fn all(&self, key: &str) -> Vec<String> {
        self.values.get(key).cloned().unwrap_or_default()
    }

    /// True when the boolean flag was given.
    pub fn has(&self, key: &str) -> bool {
        self.switches.iter().any(|s| s == key)
    }

    /// A flag parsed as a number, with a clear error.
    pub fn num<T: std::str::FromStr>(&self, key: &str) -> Result<Option<T>, String> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .parse::<T>()
                .map(Some)
                .map_err(|_| format!("--{} expects a number, got '{v}'", key.replace('_', "-"))),
        }
    }

    /// A comma list flag.
    pub fn list(&self, key: &str) -> Vec<String> {
        self.all(key)
            .iter()
            .flat_map(|v| v.split(',').map(|s| s.trim().to_string()))
            .filter(|s| !s.is_empty())
            .collect()
    }
}

/// Parses `--key` value `v` as `T`. A value that is a number but does not fit `T` says the
/// accepted `range` (`--priority: 300 is out of range: must be 0..=255`).
pub fn parse_in_range<T: std::str::FromStr>(key: &str, v: &str, range: &str) -> Result<T, String> {
    let flag = key.replace('_', "-");
    v.trim().parse::<T>().map_err(|_| {
        if v.trim().parse::<f64>().is_ok() {
            format!("--{flag}: {v} is out of range: must be {range}")
        } else {
            format!("--{flag}: '{v}' is not a number (must be {range})")
        }
    })
}

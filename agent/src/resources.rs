//! Resource quantities as integers.
//!
//! The scheduler adds and compares requests millions of times per run, so quantities are
//! parsed once into integers (CPU in millicores, everything else in base units) instead of
//! being kept as Kubernetes quantity strings.

use std::collections::BTreeMap;
use std::fmt;

/// The well-known resource names the scheduler treats specially.
pub const CPU: &str = "cpu";
pub const MEMORY: &str = "memory";
pub const PODS: &str = "pods";
pub const EPHEMERAL_STORAGE: &str = "ephemeral-storage";
pub const NVIDIA_GPU: &str = "nvidia.com/gpu";
/// Inferentia and Trainium devices, as the Neuron device plugin advertises them.
pub const AWS_NEURON: &str = "aws.amazon.com/neuron";

/// The pseudo-resource counting nodes in limit arithmetic (`limits: {nodes: "10"}`, as in
/// Karpenter v1.11). Node counts live only in the sums the limits are checked against (a
/// pool's usage and the scheduler's commitments), never in an instance type's capacity,
/// which is written to Nodes and NodeClaims where an unqualified name is invalid.
pub const NODES: &str = "nodes";

/// A bundle of resources: requests of a pod, allocatable of a node, limits of a NodePool.
///
/// Extended resources (`nvidia.com/gpu`, `vpc.amazonaws.com/efa`, ...) live in a sorted map
/// so that iteration order, and therefore every decision built on it, is deterministic.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Resources {
    pub cpu_milli: i64,
    pub memory_bytes: i64,
    pub pods: i64,
    pub ephemeral_storage_bytes: i64,
    pub extended: BTreeMap<String, i64>,
}

impl Resources {
    pub fn new(cpu_milli: i64, memory_bytes: i64) -> Self {
        Resources {
            cpu_milli,
            memory_bytes,
            ..Default::default()
        }
    }

    /// Requests of one pod: the pod itself counts against the node's `pods` capacity.
    pub fn pod(cpu_milli: i64, memory_bytes: i64) -> Self {
        Resources {
            cpu_milli,
            memory_bytes,
            pods: 1,
            ..Default::default()
        }
    }

    pub fn add(&mut self, other: &Resources) {
        self.cpu_milli += other.cpu_milli;
        self.memory_bytes += other.memory_bytes;
        self.pods += other.pods;
        self.ephemeral_storage_bytes += other.ephemeral_storage_bytes;
        for (k, v) in &other.extended {
            *self.extended.entry(k.clone()).or_insert(0) += v;
        }
    }

    pub fn sub(&mut self, other: &Resources) {
        self.cpu_milli -= other.cpu_milli;
        self.memory_bytes -= other.memory_bytes;
        self.pods -= other.pods;
        self.ephemeral_storage_bytes -= other.ephemeral_storage_bytes;
        for (k, v) in &other.extended {
            *self.extended.entry(k.clone()).or_insert(0) -= v;
        }
    }

    pub fn plus(&self, other: &Resources) -> Resources {
        let mut r = self.clone();
        r.add(other);
        r
    }

    pub fn minus(&self, other: &Resources) -> Resources {
        let mut r = self.clone();
        r.sub(other);
        r
    }

    /// True when `self` (a request) fits into `capacity`. Every counted resource is
    /// checked, ephemeral storage too: a capacity of 0 holds nothing, as in kube-scheduler's
    /// NodeResourcesFit (`pkg/scheduler/framework/plugins/noderesources/fit.go`).
    pub fn fits_in(&self, capacity: &Resources) -> bool {
        if self.cpu_milli > capacity.cpu_milli
            || self.memory_bytes > capacity.memory_bytes
            || self.pods > capacity.pods
            || self.ephemeral_storage_bytes > capacity.ephemeral_storage_bytes
        {
            return false;
        }
        self.extended
            .iter()
            .all(|(k, v)| *v <= 0 || capacity.extended.get(k).is_some_and(|c| v <= c))
    }

    /// The first resource of `self` that exceeds `capacity`, for error messages.
    pub fn first_excess(&self, capacity: &Resources) -> Option<String> {
        if self.cpu_milli > capacity.cpu_milli {
            return Some(format!("cpu {}", fmt_cpu(self.cpu_milli)));
        }
        if self.memory_bytes > capacity.memory_bytes {
            return Some(format!("memory {}", fmt_bytes(self.memory_bytes)));
        }
        if self.pods > capacity.pods {
            return Some(format!("pods {}", self.pods));
        }
        if self.ephemeral_storage_bytes > capacity.ephemeral_storage_bytes {
            return Some(format!(
                "ephemeral-storage {}",
                fmt_bytes(self.ephemeral_storage_bytes)
            ));
        }
        for (k, v) in &self.extended {
            if *v > 0 && capacity.extended.get(k).is_none_or(|c| v > c) {
                return Some(format!("{k} {v}"));
            }
        }
        None
    }

    /// Component-wise maximum, used for the worst case of a set of instance types.
    pub fn max_with(&mut self, other: &Resources) {
        self.cpu_milli = self.cpu_milli.max(other.cpu_milli);
        self.memory_bytes = self.memory_bytes.max(other.memory_bytes);
        self.pods = self.pods.max(other.pods);
        self.ephemeral_storage_bytes = self
            .ephemeral_storage_bytes
            .max(other.ephemeral_storage_bytes);
        for (k, v) in &other.extended {
            let e = self.extended.entry(k.clone()).or_insert(*v);
            *e = (*e).max(*v);
        }
    }

    /// Reads a resource map such as a pod's `requests`. Unknown names become extended
    /// resources; malformed quantities are reported with the resource name.
    pub fn from_quantities<'a, I>(items: I) -> Result<Resources, String>
    where
        I: IntoIterator<Item = (&'a str, &'a str)>,
    {
        let mut r = Resources::default();
        for (name, q) in items {
            match name {
                CPU => r.cpu_milli = parse_cpu_milli(q).map_err(|e| format!("{name}: {e}"))?,
                MEMORY => r.memory_bytes = parse_bytes(q).map_err(|e| format!("{name}: {e}"))?,
                PODS => r.pods = parse_bytes(q).map_err(|e| format!("{name}: {e}"))?,
                EPHEMERAL_STORAGE => {
                    r.ephemeral_storage_bytes =
                        parse_bytes(q).map_err(|e| format!("{name}: {e}"))?
                }
                other => {
                    let v = parse_bytes(q).map_err(|e| format!("{name}: {e}"))?;
                    r.extended.insert(other.to_string(), v);
                }
            }
        }
        Ok(r)
    }
}

impl fmt::Display for Resources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cpu={} memory={} pods={}",
            fmt_cpu(self.cpu_milli),
            fmt_bytes(self.memory_bytes),
            self.pods
        )?;
        for (k, v) in &self.extended {
            write!(f, " {k}={v}")?;
        }
        Ok(())
    }
}

pub fn fmt_cpu(milli: i64) -> String {
    if milli % 1000 == 0 {
        format!("{}", milli / 1000)
    } else {
        format!("{milli}m")
    }
}

pub fn fmt_bytes(b: i64) -> String {
    const GI: i64 = 1 << 30;
    const MI: i64 = 1 << 20;
    if b % GI == 0 {
        format!("{}Gi", b / GI)
    } else if b % MI == 0 {
        format!("{}Mi", b / MI)
    } else {
        format!("{b}")
    }
}

/// Parses a Kubernetes quantity into a real number of base units.
///
/// Accepts decimal and binary SI suffixes (`m`, `k`, `M`, `G`, `T`, `P`, `E`, `Ki` ... `Ei`)
/// and decimal exponents (`1e3`), like `resource.Quantity`.
pub fn parse_quantity(q: &str) -> Result<f64, String> {
    let s = q.trim();
    if s.is_empty() {
        return Err("empty quantity".into());
    }
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(s.len());
    let (num, suffix) = s.split_at(split);
    let (num, suffix) = if let Some(exp) = suffix.strip_prefix(['e', 'E']) {
        // "1e3" is an exponent; "1E" alone would be exa, which needs a number after it.
        if !exp.is_empty() && exp.parse::<i32>().is_ok() {
            let n: f64 = num.parse().map_err(|_| format!("invalid quantity {q:?}"))?;
            return Ok(n * 10f64.powi(exp.parse::<i32>().unwrap_or(0)));
        }
        (num, suffix)
    } else {
        (num, suffix)
    };
    let n: f64 = num.parse().map_err(|_| format!("invalid quantity {q:?}"))?;
    let mult = match suffix {
        "" => 1.0,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024.0 * 1024.0,
        "Gi" => 1024.0 * 1024.0 * 1024.0,
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        _ => return Err(format!("invalid quantity {q:?}: unknown suffix {suffix:?}")),
    };
    let v = n * mult;
    if !v.is_finite() || v < 0.0 {
        return Err(format!(
            "invalid quantity {q:?}: must be a non-negative number"
        ));
    }
    Ok(v)
}

/// CPU quantity in millicores, rounded up like the kubelet does.
pub fn parse_cpu_milli(q: &str) -> Result<i64, String> {
    Ok((parse_quantity(q)? * 1000.0 - 1e-9).ceil().max(0.0) as i64)
}

/// Any other quantity in base units, rounded up.
pub fn parse_bytes(q: &str) -> Result<i64, String> {
    Ok((parse_quantity(q)? - 1e-9).ceil().max(0.0) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities() {
        assert_eq!(parse_cpu_milli("250m").unwrap(), 250);
        assert_eq!(parse_cpu_milli("1.5").unwrap(), 1500);
        assert_eq!(parse_cpu_milli("2").unwrap(), 2000);
        assert_eq!(parse_bytes("512Mi").unwrap(), 512 << 20);
        assert_eq!(parse_bytes("1Gi").unwrap(), 1 << 30);
        assert_eq!(parse_bytes("1G").unwrap(), 1_000_000_000);
        assert_eq!(parse_bytes("1e3").unwrap(), 1000);
        assert_eq!(parse_bytes("100k").unwrap(), 100_000);
        assert!(parse_bytes("12Qi").unwrap_err().contains("unknown suffix"));
        assert!(parse_bytes("abc").is_err());
        assert!(parse_bytes("-1").is_err());
    }

    #[test]
    fn fits_and_excess() {
        let cap = Resources {
            cpu_milli: 2000,
            memory_bytes: 4 << 30,
            pods: 10,
            ..Default::default()
        };
        let mut r = Resources::pod(1000, 1 << 30);
        assert!(r.fits_in(&cap));
        r.extended.insert(NVIDIA_GPU.into(), 1);
        assert!(!r.fits_in(&cap));
        assert_eq!(r.first_excess(&cap).unwrap(), "nvidia.com/gpu 1");
        let big = Resources::pod(3000, 1);
        assert_eq!(big.first_excess(&cap).unwrap(), "cpu 3");
    }

    #[test]
    fn no_ephemeral_storage_holds_no_ephemeral_request() {
        let mut cap = Resources {
            cpu_milli: 2000,
            memory_bytes: 4 << 30,
            pods: 10,
            ..Default::default()
        };
        let mut r = Resources::pod(100, 1 << 20);
        r.ephemeral_storage_bytes = 30 << 30;
        assert!(!r.fits_in(&cap), "0 is no room, not unlimited room");
        assert_eq!(r.first_excess(&cap).unwrap(), "ephemeral-storage 30Gi");
        cap.ephemeral_storage_bytes = 17 << 30;
        assert!(!r.fits_in(&cap));
        cap.ephemeral_storage_bytes = 30 << 30;
        assert!(r.fits_in(&cap));
        assert!(Resources::pod(100, 1 << 20).fits_in(&Resources {
            ephemeral_storage_bytes: 0,
            ..cap
        }));
    }
}

//! The fast path's side of the overload control ([`crate::overload`]): the XDP programs
//! judge every request they classify against the shed plan the agent writes here
//! (`dra-ebpf/src/overload.rs`), count what they judged per priority, and count what
//! they shed per class.

use std::path::Path;
use std::sync::Mutex;

use aya::maps::{Array, HashMap, Map, MapData, PerCpuArray};
use dra_common::maps::{
    BucketConfig, ClassOverload, MAX_CLASS_PRIORITIES, OVERLOAD_ANSWER_SLOT, OverloadConfig,
    OverloadCpu, ShedCounts, names,
};
use dra_common::wire::MsgClass;

use super::DataplaneError;
use crate::overload::{Counts, PRIORITIES, Priorities, ShedCount, ShedPlan, ShedPort};

/// The overload maps of a pinned fast path.
pub struct FastPathShed {
    maps: Mutex<ShedMaps>,
}

impl std::fmt::Debug for FastPathShed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FastPathShed")
    }
}

struct ShedMaps {
    config: Array<MapData, OverloadConfig>,
    classes: HashMap<MapData, MsgClass, ClassOverload>,
    cpu: PerCpuArray<MapData, OverloadCpu>,
    counts: PerCpuArray<MapData, ShedCounts>,
    /// `BUCKET_CONFIG`, for the answer budget's slot (`None`: written elsewhere).
    buckets: Option<Array<MapData, BucketConfig>>,
    priorities: Priorities,
}

fn open<T: TryFrom<Map, Error = aya::maps::MapError>>(
    dir: &Path,
    name: &'static str,
) -> Result<T, DataplaneError> {
    let path = dir.join(name);
    let data = MapData::from_pin(&path).map_err(|source| DataplaneError::OpenPinned {
        path: path.clone(),
        source,
    })?;
    let map =
        Map::from_map_data(data).map_err(|source| DataplaneError::OpenPinned { path, source })?;
    map.try_into().map_err(DataplaneError::map(name))
}

impl FastPathShed {
    /// Takes the overload maps out of a loaded object (BPF_PROG_TEST_RUN fixtures). The
    /// answer budget's bucket lives in `BUCKET_CONFIG`, which [`super::Maps`] keeps:
    /// write it there ([`super::Maps::write_bucket`] at
    /// [`dra_common::maps::OVERLOAD_ANSWER_SLOT`]); unwritten, every shed request is
    /// answered.
    pub fn take(ebpf: &mut aya::Ebpf) -> Result<FastPathShed, DataplaneError> {
        fn get<T: TryFrom<Map, Error = aya::maps::MapError>>(
            ebpf: &mut aya::Ebpf,
            name: &'static str,
        ) -> Result<T, DataplaneError> {
            let m = ebpf
                .take_map(name)
                .ok_or(DataplaneError::MissingMap { name })?;
            m.try_into().map_err(DataplaneError::map(name))
        }
        Ok(FastPathShed {
            maps: Mutex::new(ShedMaps {
                config: get(ebpf, names::OVERLOAD)?,
                classes: get(ebpf, names::CLASS_PRIORITY)?,
                cpu: get(ebpf, names::OVERLOAD_CPU)?,
                counts: get(ebpf, names::SHED_COUNTS)?,
                buckets: None,
                priorities: Priorities {
                    classes: Vec::new(),
                    default: 8,
                },
            }),
        })
    }

    /// Opens the overload maps pinned under `dir` (the fast path is attached).
    pub fn open_pinned(dir: &Path) -> Result<FastPathShed, DataplaneError> {
        Ok(FastPathShed {
            maps: Mutex::new(ShedMaps {
                config: open(dir, names::OVERLOAD)?,
                classes: open(dir, names::CLASS_PRIORITY)?,
                cpu: open(dir, names::OVERLOAD_CPU)?,
                counts: open(dir, names::SHED_COUNTS)?,
                buckets: Some(open(dir, names::BUCKET_CONFIG)?),
                priorities: Priorities {
                    classes: Vec::new(),
                    default: 8,
                },
            }),
        })
    }
}

impl ShedMaps {
    fn config(&self) -> Result<OverloadConfig, String> {
        self.config
            .get(&0, 0)
            .map_err(|e| format!("{}: {e}", names::OVERLOAD))
    }

    fn set_config(&mut self, c: OverloadConfig) -> Result<(), String> {
        self.config
            .set(0, c, 0)
            .map_err(|e| format!("{}: {e}", names::OVERLOAD))
    }
}

impl ShedPort for FastPathShed {
    fn judged(&self) -> Counts {
        let m = self.maps.lock().expect("overload maps");
        let mut out = [0u64; PRIORITIES];
        if let Ok(per_cpu) = m.cpu.get(&0, 0) {
            for c in per_cpu.iter() {
                for (o, j) in out.iter_mut().zip(c.judged) {
                    *o += j;
                }
            }
        }
        out
    }

    fn shed(&self) -> Vec<ShedCount> {
        let m = self.maps.lock().expect("overload maps");
        (0..=m.priorities.classes.len())
            .map(|i| {
                let mut n = ShedCount {
                    class: m.priorities.label_of(i).to_owned(),
                    ..ShedCount::default()
                };
                if let Ok(per_cpu) = m.counts.get(&(i as u32), 0) {
                    for c in per_cpu.iter() {
                        n.answered += c.answered;
                        n.discarded += c.discarded;
                    }
                }
                n
            })
            .collect()
    }

    fn apply(&self, plan: &ShedPlan) -> Result<(), String> {
        let mut m = self.maps.lock().expect("overload maps");
        // The answer budget's bucket: its rate, a burst of 5 % of a second (the kernel
        // keeps its state across the change).
        let rate = plan.answer_rate;
        let bucket = if rate > 0.0 {
            BucketConfig::new(rate, ((rate * 0.05) as u32).max(1), Default::default())
        } else {
            // No budget: every shed request is discarded (a bucket that never fits).
            BucketConfig {
                interval_ns: u64::MAX / 4,
                tolerance_ns: 0,
                action: 0,
                _pad: 0,
            }
        };
        if let Some(b) = &mut m.buckets {
            b.set(OVERLOAD_ANSWER_SLOT, bucket, 0)
                .map_err(|e| format!("{}: {e}", names::BUCKET_CONFIG))?;
        }
        let mut c = m.config()?;
        c.shed = plan.units();
        c.active = u32::from(plan.is_active());
        c.answer_slot = OVERLOAD_ANSWER_SLOT;
        m.set_config(c)
    }

    fn set_priorities(&self, p: &Priorities, enabled: bool) -> Result<(), String> {
        let mut m = self.maps.lock().expect("overload maps");
        let keep: Vec<MsgClass> = p
            .classes
            .iter()
            .take(MAX_CLASS_PRIORITIES as usize - 1)
            .map(|c| c.class)
            .collect();
        for (i, c) in p.classes.iter().take(keep.len()).enumerate() {
            let v = ClassOverload {
                priority: u32::from(c.priority),
                index: i as u32 + 1,
            };
            m.classes
                .insert(c.class, v, 0)
                .map_err(|e| format!("{}: {e}", names::CLASS_PRIORITY))?;
        }
        let stale: Vec<MsgClass> = m
            .classes
            .keys()
            .filter_map(Result::ok)
            .filter(|k| !keep.contains(k))
            .collect();
        for k in stale {
            let _ = m.classes.remove(&k);
        }
        let mut c = m.config()?;
        c.enabled = u32::from(enabled);
        c.default_priority = u32::from(p.default);
        c.answer_slot = OVERLOAD_ANSWER_SLOT;
        if !enabled {
            c.active = 0;
        }
        m.priorities = p.clone();
        m.set_config(c)
    }
}

//! The resource manager's bookkeeping: which logical channels, dies and soft-planes belong to
//! which vSSD. Pure data, no device.
//!
//! Logical channels and dies are what vSSDs own; the physical die a logical die lives on
//! changes when wear-levelling swaps channels (`FlashBlox` keeps that map), so isolation and
//! wear-levelling do not disturb each other.
//!
//! Allocation is a linear search over the free lists, as in the document: whole free channels
//! for channel-isolated vSSDs; for die-isolated ones, free dies of channels already split
//! first, then dies of free channels; for soft-plane ones, free soft-planes of dies already
//! split, then of free dies in split channels, then of free channels. By default an allocation
//! packs (takes candidates in that order, splitting as few channels and dies as it can); with
//! `spread` it deals out one die (or one soft-plane per die) at a time across the allowed
//! channels, for a vSSD striped as widely as its share allows. Freeing merges: a die whose
//! soft-planes are all free is a free die again, a channel whose dies are all free a free
//! channel.

use serde::{Deserialize, Serialize};

use crate::error::{Result, VssdError};

/// The isolation level of a vSSD.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Isolation {
    /// Dedicated channels (and all their dies).
    Channel,
    /// Dedicated dies; channels may be shared with other vSSDs.
    Die,
    /// Dedicated soft-planes (a share of a die's blocks and, through the token-bucket limiter,
    /// of its bandwidth); dies are shared.
    SoftPlane,
    /// Soft-planes without the limiter.
    None,
}

impl Isolation {
    pub fn parse(s: &str) -> Option<Isolation> {
        match s {
            "channel" => Some(Isolation::Channel),
            "die" => Some(Isolation::Die),
            "soft-plane" | "softplane" | "software" => Some(Isolation::SoftPlane),
            "none" => Some(Isolation::None),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Isolation::Channel => "channel",
            Isolation::Die => "die",
            Isolation::SoftPlane => "soft-plane",
            Isolation::None => "none",
        }
    }
}

/// Soft-planes `[first_sp, first_sp + sps)` of logical die `ldie`: one stripe member of a
/// vSSD (a whole die for channel- and die-isolated vSSDs, one soft-plane otherwise).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Slot {
    pub ldie: u32,
    pub first_sp: u32,
    pub sps: u32,
}

/// Where an allocation may go and how it is laid out.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Placement {
    /// Only these logical channels (all when empty).
    pub channels: Vec<u32>,
    /// Deal dies / soft-planes across the allowed channels instead of packing them.
    pub spread: bool,
}

const FREE: u32 = u32::MAX;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Resources {
    channels: u32,
    dies_per_channel: u32,
    sps_per_die: u32,
    /// Owner (vSSD id) of each soft-plane, indexed `ldie * sps_per_die + sp`.
    owner: Vec<u32>,
}

impl Resources {
    pub fn new(channels: u32, dies_per_channel: u32, sps_per_die: u32) -> Resources {
        assert!(channels > 0 && dies_per_channel > 0 && sps_per_die > 0);
        Resources { channels, dies_per_channel, sps_per_die, owner: vec![FREE; (channels * dies_per_channel * sps_per_die) as usize] }
    }

    pub fn channels(&self) -> u32 {
        self.channels
    }
    pub fn dies_per_channel(&self) -> u32 {
        self.dies_per_channel
    }
    pub fn sps_per_die(&self) -> u32 {
        self.sps_per_die
    }

    fn sp_free(&self, ldie: u32, sp: u32) -> bool {
        self.owner[(ldie * self.sps_per_die + sp) as usize] == FREE
    }
    fn die_free(&self, ldie: u32) -> bool {
        (0..self.sps_per_die).all(|sp| self.sp_free(ldie, sp))
    }
    fn die_used(&self, ldie: u32) -> bool {
        (0..self.sps_per_die).all(|sp| !self.sp_free(ldie, sp))
    }
    fn dies_of(&self, ch: u32) -> std::ops::Range<u32> {
        ch * self.dies_per_channel..(ch + 1) * self.dies_per_channel
    }
    fn channel_free(&self, ch: u32) -> bool {
        self.dies_of(ch).all(|d| self.die_free(d))
    }

    /// Channels with nothing allocated.
    pub fn free_channels(&self) -> Vec<u32> {
        (0..self.channels).filter(|&c| self.channel_free(c)).collect()
    }
    /// Free dies of channels that are partly allocated.
    pub fn free_dies(&self) -> Vec<u32> {
        (0..self.channels).filter(|&c| !self.channel_free(c)).flat_map(|c| self.dies_of(c)).filter(|&d| self.die_free(d)).collect()
    }
    /// Free soft-planes (die, soft-plane) of dies that are partly allocated.
    pub fn free_soft_planes(&self) -> Vec<(u32, u32)> {
        let dies = self.channels * self.dies_per_channel;
        (0..dies)
            .filter(|&d| !self.die_free(d) && !self.die_used(d))
            .flat_map(|d| (0..self.sps_per_die).filter(move |&sp| self.sp_free(d, sp)).map(move |sp| (d, sp)))
            .collect()
    }

    /// Logical die -> owner of each soft-plane (FREE = u32::MAX).
    pub fn owners(&self, ldie: u32) -> &[u32] {
        let s = self.sps_per_die as usize;
        &self.owner[ldie as usize * s..(ldie as usize + 1) * s]
    }

    fn allowed(&self, p: &Placement) -> Result<Vec<u32>> {
        if p.channels.is_empty() {
            return Ok((0..self.channels).collect());
        }
        let mut v = p.channels.clone();
        v.sort_unstable();
        v.dedup();
        if let Some(&c) = v.iter().find(|&&c| c >= self.channels) {
            return Err(VssdError::Config(format!("placement names channel {c}; the device has {}", self.channels)));
        }
        Ok(v)
    }

    /// Take `units` channels, dies or soft-planes for vSSD `id` (see the module docs).
    pub fn alloc(&mut self, id: u32, level: Isolation, units: u32, p: &Placement) -> Result<Vec<Slot>> {
        assert_ne!(id, FREE);
        assert!(units > 0);
        let allowed = self.allowed(p)?;
        let s = self.sps_per_die;
        let short = |what: &str, have: usize| {
            VssdError::NoResources(format!(
                "{} needs {units} {what}, {have} free{}",
                level.name(),
                if p.channels.is_empty() { String::new() } else { format!(" on channels {:?}", allowed) }
            ))
        };
        let slots: Vec<Slot> = match level {
            Isolation::Channel => {
                let free: Vec<u32> = allowed.iter().copied().filter(|&c| self.channel_free(c)).collect();
                if free.len() < units as usize {
                    return Err(short("channels", free.len()));
                }
                free[..units as usize].iter().flat_map(|&c| self.dies_of(c)).map(|d| Slot { ldie: d, first_sp: 0, sps: s }).collect()
            }
            Isolation::Die => {
                // Channels already split first, then free ones; dies in order within each.
                let split: Vec<Vec<u32>> = allowed
                    .iter()
                    .filter(|&&c| !self.channel_free(c))
                    .map(|&c| self.dies_of(c).filter(|&d| self.die_free(d)).collect::<Vec<u32>>())
                    .filter(|v| !v.is_empty())
                    .collect();
                let free: Vec<Vec<u32>> = allowed.iter().filter(|&&c| self.channel_free(c)).map(|&c| self.dies_of(c).collect()).collect();
                let have: usize = split.iter().chain(free.iter()).map(|v| v.len()).sum();
                if have < units as usize {
                    return Err(short("dies", have));
                }
                let order = if p.spread {
                    deal(split.into_iter().chain(free).collect())
                } else {
                    split.into_iter().chain(free).flatten().collect()
                };
                order[..units as usize].iter().map(|&d| Slot { ldie: d, first_sp: 0, sps: s }).collect()
            }
            Isolation::SoftPlane | Isolation::None => {
                // Dies in three tiers (split dies, free dies of split channels, dies of free
                // channels); within a tier, dies interleaved across channels.
                let tier = |f: &dyn Fn(u32, u32) -> bool| -> Vec<u32> {
                    let per: Vec<Vec<u32>> = allowed.iter().map(|&c| self.dies_of(c).filter(|&d| f(c, d)).collect()).collect();
                    deal(per)
                };
                let split_dies = tier(&|_, d| !self.die_free(d) && !self.die_used(d));
                let free_in_split = tier(&|c, d| !self.channel_free(c) && self.die_free(d));
                let in_free = tier(&|c, _| self.channel_free(c));
                let dies: Vec<u32> = split_dies.into_iter().chain(free_in_split).chain(in_free).collect();
                let per_die: Vec<Vec<u32>> = dies.iter().map(|&d| (0..s).filter(|&sp| self.sp_free(d, sp)).collect()).collect();
                let have: usize = per_die.iter().map(|v| v.len()).sum();
                if have < units as usize {
                    return Err(short("soft-planes", have));
                }
                let picks: Vec<(u32, u32)> = if p.spread {
                    let per: Vec<Vec<(u32, u32)>> =
                        dies.iter().zip(&per_die).map(|(&d, sps)| sps.iter().map(|&sp| (d, sp)).collect()).collect();
                    deal(per)
                } else {
                    dies.iter().zip(&per_die).flat_map(|(&d, sps)| sps.iter().map(move |&sp| (d, sp))).collect()
                };
                picks[..units as usize].iter().map(|&(d, sp)| Slot { ldie: d, first_sp: sp, sps: 1 }).collect()
            }
        };
        for sl in &slots {
            for sp in sl.first_sp..sl.first_sp + sl.sps {
                let o = &mut self.owner[(sl.ldie * s + sp) as usize];
                assert_eq!(*o, FREE, "allocating soft-plane {sp} of die {} twice", sl.ldie);
                *o = id;
            }
        }
        Ok(slots)
    }

    /// Record `slots` as vSSD `id`'s (recovery from a layout table).
    pub fn assign(&mut self, id: u32, slots: &[Slot]) -> Result<()> {
        for sl in slots {
            if sl.ldie >= self.channels * self.dies_per_channel || sl.sps == 0 || sl.first_sp + sl.sps > self.sps_per_die {
                return Err(VssdError::Recovery(format!("vSSD {id}: slot {sl:?} is outside the device")));
            }
            for sp in sl.first_sp..sl.first_sp + sl.sps {
                let o = &mut self.owner[(sl.ldie * self.sps_per_die + sp) as usize];
                if *o != FREE {
                    return Err(VssdError::Recovery(format!("vSSD {id}: soft-plane {sp} of die {} also belongs to vSSD {}", sl.ldie, *o)));
                }
                *o = id;
            }
        }
        Ok(())
    }

    /// Give back everything vSSD `id` holds. Merging is implicit: a die (channel) with nothing
    /// allocated is a free die (channel).
    pub fn free(&mut self, id: u32) -> u32 {
        let mut n = 0;
        for o in self.owner.iter_mut().filter(|o| **o == id) {
            *o = FREE;
            n += 1;
        }
        n
    }
}

/// One element from each list in turn until all are used up (round-robin dealing).
fn deal<T: Copy>(lists: Vec<Vec<T>>) -> Vec<T> {
    let mut out = Vec::new();
    let longest = lists.iter().map(|v| v.len()).max().unwrap_or(0);
    for i in 0..longest {
        out.extend(lists.iter().filter_map(|v| v.get(i).copied()));
    }
    out
}

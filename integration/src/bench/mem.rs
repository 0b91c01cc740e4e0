//! A process's memory as the kernel accounts it (`/proc/<pid>/smaps_rollup`): what it
//! allocated (anonymous) and what it dirtied, apart from the clean file pages (its binary,
//! libraries) that the kernel maps and can drop. Resident size alone mixes the two.

/// KiB, from one read of `smaps_rollup`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Footprint {
    /// Resident, everything.
    pub rss: u64,
    /// Anonymous pages: the heap, stacks, private copies.
    pub anonymous: u64,
    /// Dirty pages, private and shared, anonymous ones included.
    pub dirty: u64,
    /// Clean file pages mapped privately (the binary's text and data read from disk).
    pub private_clean: u64,
}

impl Footprint {
    /// `pid`'s footprint; zeros when it cannot be read (the process is gone).
    pub fn of(pid: u32) -> Footprint {
        std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
            .map(|t| parse(&t))
            .unwrap_or_default()
    }

    /// Anonymous plus dirty file pages: what the process holds that the kernel cannot
    /// drop without writing, its own cost to the node.
    pub fn own(&self) -> u64 {
        self.anonymous + self.dirty.saturating_sub(self.anonymous)
    }
}

fn parse(text: &str) -> Footprint {
    let get = |k: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(k))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    Footprint {
        rss: get("Rss:"),
        anonymous: get("Anonymous:"),
        dirty: get("Private_Dirty:") + get("Shared_Dirty:"),
        private_clean: get("Private_Clean:"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_rollup() {
        let text = "00400000-7fff0000 ---p 00000000 00:00 0 [rollup]\nRss:  16000 kB\nPss:  15000 kB\nShared_Clean: 100 kB\nShared_Dirty: 0 kB\nPrivate_Clean: 14000 kB\nPrivate_Dirty: 1900 kB\nAnonymous: 1600 kB\n";
        let f = parse(text);
        assert_eq!(
            f,
            Footprint {
                rss: 16000,
                anonymous: 1600,
                dirty: 1900,
                private_clean: 14000
            }
        );
        assert_eq!(f.own(), 1900);
        let me = Footprint::of(std::process::id());
        assert!(me.rss > 0 && me.anonymous > 0, "{me:?}");
    }
}

//! Which pages of a linear memory were ever touched, from the kernel's page map: a page never
//! touched still holds its initial contents and need not even be read.

#[cfg(target_os = "linux")]
use std::sync::OnceLock;

/// Elsewhere than Linux every chunk is compared.
#[cfg(not(target_os = "linux"))]
pub(super) fn touched_chunks(_: &[u8]) -> Option<Vec<bool>> {
    None
}

/// The granularity of a snapshot's diff: the OS page, as the pagemap reports.
pub(crate) const CHUNK: usize = 4096;

/// Which [`CHUNK`]s of `memory` were ever touched (resident or swapped out), from the kernel's
/// page map; `None` when that cannot be read (pages larger than a chunk, or no `/proc`), and every
/// chunk must be compared.
#[cfg(target_os = "linux")]
pub(super) fn touched_chunks(memory: &[u8]) -> Option<Vec<bool>> {
    use std::os::unix::fs::FileExt;
    static PAGEMAP: OnceLock<Option<std::fs::File>> = OnceLock::new();
    let pagemap = PAGEMAP
        .get_or_init(|| {
            if page_size() != CHUNK {
                return None;
            }
            std::fs::File::open("/proc/self/pagemap").ok()
        })
        .as_ref()?;
    let start = memory.as_ptr() as usize;
    if !start.is_multiple_of(CHUNK) || memory.is_empty() {
        return None;
    }
    let pages = memory.len().div_ceil(CHUNK);
    let mut entries = vec![0u8; pages * 8];
    pagemap
        .read_exact_at(&mut entries, (start / CHUNK * 8) as u64)
        .ok()?;
    const PRESENT: u64 = 1 << 63;
    const SWAPPED: u64 = 1 << 62;
    Some(
        entries
            .chunks_exact(8)
            .map(|entry| {
                let entry = u64::from_ne_bytes(entry.try_into().expect("eight bytes"));
                entry & (PRESENT | SWAPPED) != 0
            })
            .collect(),
    )
}

#[cfg(target_os = "linux")]
fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size).unwrap_or(0)
}

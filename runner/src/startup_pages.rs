//! Gives back the executable's pages that only start-up used (issue 14).
//!
//! Most of an idle runner's resident set was its own executable: every page
//! of code and read-only data that start-up ran through (arguments and
//! settings, the state database's schema, the HTTP/2 client, registration,
//! each SDK's probe) stayed mapped after start-up was over, and the kernel's
//! fault-around maps up to 16 pages around each one touched.
//!
//! Those pages are clean copies of the file. Once start-up is over,
//! `MADV_DONTNEED` on the executable's never-written segments unmaps them;
//! what the runner goes on running faults back in from the page cache (a
//! minor fault, no I/O). The pages stay in the page cache: this shrinks the
//! runner's RSS, not the machine's cache, which the kernel reclaims when it
//! needs to either way.
//!
//! Only segments the process never writes are touched: loaded, not
//! writable, outside the RELRO range (relocated at load, so its pages are
//! private copies that must stay), and only when the executable has no text
//! relocations. Anything else keeps its pages.

use std::ffi::{c_int, c_void};

/// `DT_TEXTREL`, `DT_FLAGS` and its `DF_TEXTREL` bit, from `<elf.h>`.
const DT_NULL: i64 = 0;
const DT_TEXTREL: i64 = 22;
const DT_FLAGS: i64 = 30;
const DF_TEXTREL: u64 = 0x4;

/// An entry of the dynamic section (`Elf64_Dyn`).
#[repr(C)]
struct Dyn {
    tag: i64,
    val: u64,
}

/// A range of the executable's never-written pages, `[start, end)`.
type Range = (usize, usize);

/// Unmaps the executable's never-written pages; they fault back in from
/// the page cache as they are used. Returns the bytes unmapped (whether
/// resident or not).
pub fn release() -> usize {
    let mut ranges: Vec<Range> = Vec::new();
    // SAFETY: `collect` is called synchronously, only during this call, with
    // the pointer to `ranges`, which outlives it.
    unsafe {
        libc::dl_iterate_phdr(Some(collect), (&raw mut ranges).cast());
    }
    let page = page_size();
    let mut released = 0;
    for (start, end) in ranges {
        let (start, end) = (start.next_multiple_of(page), end / page * page);
        if end <= start {
            continue;
        }
        // SAFETY: the range lies in a loaded, never-written segment of the
        // executable (see `collect`), whose pages equal the file's; dropping
        // them changes no byte the process reads.
        if unsafe { libc::madvise(start as *mut c_void, end - start, libc::MADV_DONTNEED) } == 0 {
            released += end - start;
        }
    }
    tracing::debug!(
        kib = released / 1024,
        "start-up over: released the executable's pages"
    );
    released
}

fn page_size() -> usize {
    // SAFETY: sysconf reads a constant.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size).unwrap_or(4096).max(4096)
}

/// `dl_iterate_phdr`'s callback: the first object is the executable. Its
/// loaded, non-writable segments go into `data` (a `Vec<Range>`), unless it
/// has text relocations; then it stops the walk.
unsafe extern "C" fn collect(
    info: *mut libc::dl_phdr_info,
    _size: usize,
    data: *mut c_void,
) -> c_int {
    // SAFETY: glibc passes a valid `dl_phdr_info` whose program headers
    // are mapped, and `data` is the `Vec<Range>` given in `release`.
    let (info, ranges) = unsafe { (&*info, &mut *data.cast::<Vec<Range>>()) };
    if info.dlpi_phdr.is_null() {
        return 1;
    }
    // SAFETY: as above: `dlpi_phnum` headers at `dlpi_phdr`.
    let headers =
        unsafe { std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) };
    let base = info.dlpi_addr as usize;
    let at = |vaddr: u64| base.wrapping_add(vaddr as usize);
    // SAFETY: a PT_DYNAMIC header's address is the loaded dynamic section.
    if headers
        .iter()
        .any(|h| h.p_type == libc::PT_DYNAMIC && unsafe { text_relocations(at(h.p_vaddr)) })
    {
        return 1;
    }
    let relro = headers
        .iter()
        .find(|h| h.p_type == libc::PT_GNU_RELRO)
        .map(|h| (at(h.p_vaddr), at(h.p_vaddr + h.p_memsz)));
    for h in headers {
        if h.p_type != libc::PT_LOAD || h.p_flags & libc::PF_W != 0 {
            continue;
        }
        let range = (at(h.p_vaddr), at(h.p_vaddr + h.p_filesz));
        let overlaps_relro = relro.is_some_and(|(s, e)| range.0 < e && s < range.1);
        if !overlaps_relro {
            ranges.push(range);
        }
    }
    1
}

/// Whether the dynamic section at `addr` asks for text relocations (then
/// read-only segments were written at load and must keep their pages).
///
/// # Safety
/// `addr` must be a loaded dynamic section, ended by `DT_NULL`.
unsafe fn text_relocations(addr: usize) -> bool {
    let mut entry = addr as *const Dyn;
    loop {
        // SAFETY: entries up to and including DT_NULL are readable.
        let d = unsafe { &*entry };
        match d.tag {
            DT_NULL => return false,
            DT_TEXTREL => return true,
            DT_FLAGS if d.val & DF_TEXTREL != 0 => return true,
            _ => {}
        }
        // SAFETY: not DT_NULL yet, so another entry follows.
        entry = unsafe { entry.add(1) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pointers the loader relocated: they live in the RELRO range, which
    /// must keep its pages (unrelocated file bytes would be garbage).
    static NAMES: &[&str] = &["alpha", "beta", "gamma"];

    /// Resident KiB of this executable's mappings that are not writable.
    fn resident_readonly_kib() -> u64 {
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let exe = exe.to_string_lossy().into_owned();
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut total = 0;
        let mut counting = false;
        for line in smaps.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields
                .first()
                .is_some_and(|f| f.contains('-') && !f.ends_with(':'))
            {
                counting = fields.get(5) == Some(&exe.as_str())
                    && fields.get(1).is_some_and(|p| !p.contains('w'));
            } else if counting && fields.first() == Some(&"Rss:") {
                total += fields[1].parse::<u64>().unwrap();
            }
        }
        total
    }

    #[test]
    fn release_drops_read_only_pages_and_keeps_relocated_data() {
        let before = resident_readonly_kib();
        let released = release();
        let after = resident_readonly_kib();
        assert!(released > 0, "nothing released");
        assert!(
            after < before,
            "resident read-only pages {before} KiB before, {after} KiB after"
        );
        // Relocated pointers still point at their strings, and code still runs.
        assert_eq!(NAMES.iter().map(|n| n.len()).sum::<usize>(), 14);
        assert_eq!(format!("{}", NAMES[2]), "gamma");
    }
}

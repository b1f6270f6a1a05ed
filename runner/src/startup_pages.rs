//! Gives back the code pages that only start-up used (issue 14).
//!
//! Most of an idle runner's resident set was its own executable: every page
//! of code and read-only data that start-up ran through (arguments and
//! settings, the state database's schema, the HTTP/2 client, registration,
//! each SDK's probe) stayed mapped after start-up was over, and the kernel's
//! fault-around maps up to 16 pages around each one touched.
//!
//! Those pages are clean copies of the file. Once start-up is over,
//! `MADV_DONTNEED` on the never-written segments of the executable and of
//! the libraries it loaded (libc, libm, the dynamic loader) unmaps them;
//! what the runner goes on running faults back in from the page cache (a
//! minor fault, no I/O). The pages stay in the page cache: this shrinks the
//! runner's RSS, not the machine's cache, which the kernel reclaims when it
//! needs to either way.
//!
//! Only segments the process never writes are touched: loaded, not
//! writable, outside the RELRO range (relocated at load, so its pages are
//! private copies that must stay), and only of an object without text
//! relocations, loaded from a file (not the vDSO). Anything else keeps its
//! pages.

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

/// A range of never-written pages, `[start, end)`.
type Range = (usize, usize);

/// What the walk over the loaded objects collects.
#[derive(Default)]
struct Walk {
    /// Objects seen so far; the first is the executable.
    objects: usize,
    ranges: Vec<Range>,
}

/// Unmaps the loaded objects' never-written pages; they fault back in from
/// the page cache as they are used. Returns the bytes unmapped (whether
/// resident or not).
pub fn release() -> usize {
    let mut walk = Walk::default();
    // SAFETY: `collect` is called synchronously, only during this call, with
    // the pointer to `walk`, which outlives it.
    unsafe {
        libc::dl_iterate_phdr(Some(collect), (&raw mut walk).cast());
    }
    let page = page_size();
    let mut released = 0;
    for (start, end) in walk.ranges {
        let (start, end) = (start.next_multiple_of(page), end / page * page);
        if end <= start {
            continue;
        }
        // SAFETY: the range lies in a loaded, never-written segment of an
        // object loaded from a file (see `collect`), whose pages equal the file's; dropping
        // them changes no byte the process reads.
        if unsafe { libc::madvise(start as *mut c_void, end - start, libc::MADV_DONTNEED) } == 0 {
            released += end - start;
        }
    }
    tracing::debug!(
        kib = released / 1024,
        "start-up over: released the pages of its code"
    );
    released
}

fn page_size() -> usize {
    // SAFETY: sysconf reads a constant.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size).unwrap_or(4096).max(4096)
}

/// `dl_iterate_phdr`'s callback, once per loaded object (the first is the
/// executable, then the libraries). An object's loaded, non-writable
/// segments go into `data` (the [`Walk`]), unless it has text relocations.
unsafe extern "C" fn collect(
    info: *mut libc::dl_phdr_info,
    _size: usize,
    data: *mut c_void,
) -> c_int {
    // SAFETY: glibc passes a valid `dl_phdr_info` whose program headers
    // are mapped, and `data` is the `Walk` given in `release`.
    let (info, walk) = unsafe { (&*info, &mut *data.cast::<Walk>()) };
    let first = walk.objects == 0;
    walk.objects += 1;
    if info.dlpi_phdr.is_null() || !(first || loaded_by_path(info)) {
        return 0;
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
        return 0;
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
            walk.ranges.push(range);
        }
    }
    0
}

/// Whether a library was loaded from a file by path (libc, libm, the
/// dynamic loader), unlike the vDSO, whose pages the kernel provides.
fn loaded_by_path(info: &libc::dl_phdr_info) -> bool {
    // SAFETY: a non-null `dlpi_name` is a NUL-terminated string.
    !info.dlpi_name.is_null()
        && unsafe { std::ffi::CStr::from_ptr(info.dlpi_name) }
            .to_bytes()
            .starts_with(b"/")
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

    /// Resident KiB of the mappings that are not writable, of the files
    /// whose path `of` accepts.
    fn resident_readonly_kib(of: impl Fn(&str) -> bool) -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut total = 0;
        let mut counting = false;
        for line in smaps.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields
                .first()
                .is_some_and(|f| f.contains('-') && !f.ends_with(':'))
            {
                counting = fields.get(5).is_some_and(|path| of(path))
                    && fields.get(1).is_some_and(|p| !p.contains('w'));
            } else if counting && fields.first() == Some(&"Rss:") {
                total += fields[1].parse::<u64>().unwrap();
            }
        }
        total
    }

    #[test]
    fn release_drops_read_only_pages_and_keeps_relocated_data() {
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let exe = exe.to_string_lossy().into_owned();
        let of_exe = |path: &str| path == exe;
        let of_libc = |path: &str| path.contains("/libc.so");
        let before = (
            resident_readonly_kib(of_exe),
            resident_readonly_kib(of_libc),
        );
        let released = release();
        let after = (
            resident_readonly_kib(of_exe),
            resident_readonly_kib(of_libc),
        );
        assert!(released > 0, "nothing released");
        assert!(
            after.0 < before.0,
            "the executable's resident read-only pages: {} KiB before, {} KiB after",
            before.0,
            after.0
        );
        assert!(
            after.1 < before.1,
            "libc's resident read-only pages: {} KiB before, {} KiB after",
            before.1,
            after.1
        );
        // Relocated pointers still point at their strings, and code still runs.
        assert_eq!(NAMES.iter().map(|n| n.len()).sum::<usize>(), 14);
        assert_eq!(format!("{}", NAMES[2]), "gamma");
    }
}

/* Gives back the pages of the loaded modules' unwind tables that unwinding read. */
#include "tracer_internal.h"

#include <elf.h>
#include <link.h>
#include <stdint.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <unistd.h>

/* The kernel maps the page read and those around it in windows of this size. */
#define FAULT_AROUND ((uintptr_t)64 << 10)

/* Whether the loader wrote into the module's read-only segments (text relocations): then
 * their pages are private copies, and dropping them would undo the relocations. */
static int has_text_relocations(const struct dl_phdr_info *info)
{
    for (unsigned i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_DYNAMIC)
            continue;
        for (const ElfW(Dyn) *d = (const ElfW(Dyn) *)(info->dlpi_addr + ph->p_vaddr);
             d->d_tag != DT_NULL; d++)
            if (d->d_tag == DT_TEXTREL || (d->d_tag == DT_FLAGS && (d->d_un.d_val & DF_TEXTREL)))
                return 1;
    }
    return 0;
}

/* Whether one of the frames lies in the module: libunwind read only those modules' tables. */
static int holds_a_frame(const struct dl_phdr_info *info, const struct om_stack *stack)
{
    for (unsigned i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD)
            continue;
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
        for (unsigned f = 0; f < stack->depth; f++)
            if ((uintptr_t)stack->frames[f] - lo < ph->p_memsz)
                return 1;
    }
    return 0;
}

static const ElfW(Phdr) * segment_of(const struct dl_phdr_info *info, uintptr_t vaddr)
{
    for (unsigned i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_LOAD && vaddr >= ph->p_vaddr && vaddr - ph->p_vaddr < ph->p_memsz)
            return ph;
    }
    return NULL;
}

/* Runs under the loader's lock, so no module can be unloaded (and its range reused by
 * some writable mapping) between finding a range and dropping it. */
static int drop_module(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    const struct om_stack *stack = data;
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    if (info->dlpi_addr == getauxval(AT_SYSINFO_EHDR) || !holds_a_frame(info, stack))
        return 0; /* the vDSO has no file behind it */
    const ElfW(Phdr) *hdr = NULL;
    for (unsigned i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_GNU_EH_FRAME)
            hdr = &info->dlpi_phdr[i];
    if (!hdr)
        return 0;
    const ElfW(Phdr) *seg = segment_of(info, hdr->p_vaddr);
    /* Only pages that are the file's, never written: a writable segment (RELRO included)
     * holds the program's data, and its copy-on-write pages cannot be read back. Where the
     * tables share an executable segment with code (linked without separate code), they
     * are left alone too: breakpoints and uprobes live in copies of code pages. */
    if (!seg || (seg->p_flags & (PF_W | PF_X)) || seg->p_filesz != seg->p_memsz ||
        has_text_relocations(info))
        return 0;
    /* From the window that reading .eh_frame_hdr's first page mapped to the end of the
     * segment: .eh_frame follows the header and .gcc_except_table follows .eh_frame, as
     * GNU ld and lld lay them out. The tables are only found, never read here: a read
     * would map a window of its own. Read-only data that shares the first window is
     * mapped again if it is used. */
    uintptr_t seg_lo = info->dlpi_addr + seg->p_vaddr;
    uintptr_t from = (info->dlpi_addr + hdr->p_vaddr) & ~(FAULT_AROUND - 1);
    if (from < seg_lo)
        from = (seg_lo + page - 1) & ~(page - 1);
    uintptr_t to = (seg_lo + seg->p_memsz) & ~(page - 1);
    if (to > from)
        (void)madvise((void *)from, to - from, MADV_DONTNEED);
    return 0;
}

void om_unwind_pages_drop(const struct om_stack *stack)
{
    dl_iterate_phdr(drop_module, (void *)stack);
}

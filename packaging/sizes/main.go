// Command sizes attributes a Go binary's bytes to the modules (or
// packages) its symbols came from, so a size budget can be argued with
// numbers: which dependency costs what, and what is the runtime's.
//
//	go run ./packaging/sizes [-by module|package] [-top N] BINARY...
//
// The binary must keep its symbol table (built without -s); the report
// gives the size it would have stripped. Symbol sizes cover code, rodata
// and data; the function tables (.gopclntab, about a third of a stripped
// binary, roughly in proportion to code) are reported apart.
package main

import (
	"debug/buildinfo"
	"debug/elf"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

func main() {
	by := flag.String("by", "module", "group symbols by module or package")
	top := flag.Int("top", 25, "rows to print per binary (0: all)")
	flag.Parse()
	if flag.NArg() == 0 || (*by != "module" && *by != "package") {
		fmt.Fprintln(os.Stderr, "usage: sizes [-by module|package] [-top N] BINARY...")
		os.Exit(2)
	}
	for _, path := range flag.Args() {
		if err := report(os.Stdout, path, *by, *top); err != nil {
			fmt.Fprintf(os.Stderr, "sizes: %s: %v\n", path, err)
			os.Exit(1)
		}
	}
}

func mib(b uint64) string { return fmt.Sprintf("%.2f", float64(b)/(1<<20)) }

func report(w io.Writer, path, by string, top int) error {
	f, err := elf.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	syms, err := f.Symbols()
	if err != nil {
		return fmt.Errorf("no symbol table (build without -s): %w", err)
	}
	var mods []string
	if bi, err := buildinfo.ReadFile(path); err == nil {
		mods = append(mods, bi.Main.Path)
		for _, d := range bi.Deps {
			mods = append(mods, d.Path)
		}
	}

	// What -s -w drops: the symbol table and the DWARF sections.
	var dropped, inFile uint64
	for _, s := range f.Sections {
		if s.Name == ".symtab" || s.Name == ".strtab" || strings.HasPrefix(s.Name, ".debug") || strings.HasPrefix(s.Name, ".zdebug") {
			dropped += s.FileSize
		}
	}
	stripped := uint64(st.Size()) - dropped

	// Only symbols that occupy the file: .bss and .noptrbss cost memory, not image bytes.
	var sized []Symbol
	for _, s := range syms {
		if s.Size == 0 || int(s.Section) <= 0 || int(s.Section) >= len(f.Sections) {
			continue
		}
		sec := f.Sections[s.Section]
		if sec.Type == elf.SHT_NOBITS || sec.Flags&elf.SHF_ALLOC == 0 || sec.Name == ".gopclntab" {
			continue
		}
		sized = append(sized, Symbol{s.Name, s.Size})
		inFile += s.Size
	}

	fmt.Fprintf(w, "%s (%s/%s): %s MiB stripped (%d bytes)\n", path, f.Class, f.Machine, mib(stripped), stripped)
	fmt.Fprintf(w, "  %10s %6s  section\n", "bytes", "%")
	for _, s := range f.Sections {
		if s.Type == elf.SHT_NOBITS || s.Flags&elf.SHF_ALLOC == 0 || s.Size < 4096 {
			continue
		}
		fmt.Fprintf(w, "  %10d %5.1f%%  %s\n", s.Size, 100*float64(s.Size)/float64(stripped), s.Name)
	}
	key := func(pkg string) string { return pkg }
	if by == "module" {
		key = func(pkg string) string { return moduleOf(pkg, mods) }
	}
	rows := group(sized, mods, key)
	fmt.Fprintf(w, "  %10s %6s  %s (symbols: %s MiB of code, rodata and data; .gopclntab not included)\n", "bytes", "%", by, mib(inFile))
	for i, r := range rows {
		if top > 0 && i == top {
			var rest uint64
			for _, r := range rows[i:] {
				rest += r.Bytes
			}
			fmt.Fprintf(w, "  %10d %5.1f%%  (%d more)\n", rest, 100*float64(rest)/float64(stripped), len(rows)-i)
			break
		}
		fmt.Fprintf(w, "  %10d %5.1f%%  %s\n", r.Bytes, 100*float64(r.Bytes)/float64(stripped), r.Group)
	}
	fmt.Fprintln(w)
	return nil
}

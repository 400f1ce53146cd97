//! The XDP program with the dra-common scanner compiled in loads and passes the
//! verifier on this kernel, and attaches natively to a veth in a test namespace.

use dra_tests::netns::{Netns, VethPair};

#[test]
fn xdp_program_passes_the_verifier() {
    let mut ebpf = dra::dataplane::open().expect("open embedded object");
    dra::dataplane::load_xdp(&mut ebpf).expect("verifier accepts dra_xdp");
    let names = std::iter::once(dra::dataplane::XDP_PROGRAM)
        .chain(dra::dataplane::XDP_TAIL_PROGRAMS.iter().map(|(_, n)| *n));
    for name in names {
        let prog: &aya::programs::Xdp = ebpf.program(name).unwrap().try_into().unwrap();
        let info = prog.info().expect("program info");
        // The kernel keeps the first 15 bytes of the name.
        let short = &name[..name.len().min(15)];
        assert_eq!(info.name_as_str(), Some(short));
        println!(
            "{name}: verifier processed {:?} instructions; {:?} instructions after translation",
            info.verified_instruction_count(),
            info.size_translated().map(|b| b / 8)
        );
    }
}

#[test]
fn xdp_attaches_natively_on_veth() {
    let a = Netns::new("dta").unwrap();
    let b = Netns::new("dtb").unwrap();
    let veth = VethPair::new(&a, "198.18.0.1/30", &b, "198.18.0.2/30").unwrap();
    b.enter(|| {
        let mut ebpf = dra::dataplane::open().expect("open");
        dra::dataplane::load_xdp(&mut ebpf).expect("load");
        let prog: &mut aya::programs::Xdp = ebpf
            .program_mut(dra::dataplane::XDP_PROGRAM)
            .unwrap()
            .try_into()
            .unwrap();
        prog.attach(&veth.b_if, aya::programs::XdpMode::Driver)
            .expect("native attach on veth");
    })
    .unwrap();
}

/// The programs only `cargo xtask bench xdp` loads (the bare XDP_PASS and the floor) are
/// in the same object: a bench run must not be the first to find one refused.
#[test]
fn the_bench_programs_pass_the_verifier() {
    let mut ebpf = dra::dataplane::open().expect("open embedded object");
    for name in ["dra_xdp_pass", "dra_xdp_floor"] {
        let prog: &mut aya::programs::Xdp = ebpf.program_mut(name).unwrap().try_into().unwrap();
        prog.load()
            .unwrap_or_else(|e| panic!("the verifier refuses {name}: {e:?}"));
        let info = prog.info().expect("program info");
        println!(
            "{name}: verifier processed {:?} instructions",
            info.verified_instruction_count()
        );
    }
}

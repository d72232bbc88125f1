//! Client steering: a classic-BPF reuseport program that sends every client prefix to one core.
//!
//! Each listener's sockets form one SO_REUSEPORT group, socket `i` belonging to core `i` (they
//! are bound in core order). Without a program the kernel picks a socket by the 4-tuple hash, so
//! one client's queries from different source ports land on different cores and each core's
//! limiter sees only part of them. The program returns `hash(client prefix) % cores` instead, so
//! a prefix always reaches the same core and its one token bucket there is exact.
//!
//! ```text
//! ldb [net+0] >> 4 == 4 ? ─ IPv4: exempt prefixes? ─ ret -1 (kernel hash)
//!        │                        └ ret hash(src & v4 mask) % cores
//!        └ IPv6: exempt prefixes? ─ ret -1
//!                 └ ret hash(first 64 bits of src & v6 mask) % cores
//! ```
//!
//! Allowlisted prefixes are exempt: they are never limited, so they keep the kernel's spreading
//! across cores (a proxy or big resolver in the allowlist is not pinned to one core). Returning
//! an index past the group makes the kernel fall back to its hash. IPv6 uses at most the first
//! 64 address bits (cBPF loads 32 bits at a time); a longer `ipv6Prefix` still keeps each of its
//! prefixes on one core, since it lies inside one /64.

use kudurru_core::{Prefix, RateLimit};

/// One classic BPF instruction (`struct sock_filter`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Insn {
    /// Opcode.
    pub code: u16,
    /// Jump offset when true.
    pub jt: u8,
    /// Jump offset when false.
    pub jf: u8,
    /// Operand.
    pub k: u32,
}

// Opcodes (linux/filter.h, linux/bpf_common.h).
const LD_W_ABS: u16 = 0x20;
const LD_B_ABS: u16 = 0x30;
const ALU_AND_K: u16 = 0x54;
const ALU_RSH_K: u16 = 0x74;
const ALU_MUL_K: u16 = 0x24;
const ALU_MOD_K: u16 = 0x94;
const ALU_ADD_X: u16 = 0x0c;
const ALU_XOR_X: u16 = 0xac;
const MISC_TAX: u16 = 0x07;
const JMP_JEQ_K: u16 = 0x15;
const JMP_JA: u16 = 0x05;
const RET_K: u16 = 0x06;
const RET_A: u16 = 0x16;

/// `SKF_NET_OFF`: loads relative to the network (IP) header; the program otherwise sees the
/// packet from the transport payload on.
const NET: u32 = (-0x10_0000i32) as u32;
/// An index no group has: the kernel falls back to its own hash.
const KERNEL_HASH: u32 = u32::MAX;
const GOLDEN: u32 = 0x9e37_79b1;
/// Most allowlist entries compiled into the program (cBPF allows 4096 instructions); the
/// configuration refuses longer allowlists.
pub const MAX_EXEMPT: usize = 256;

fn op(code: u16, k: u32) -> Insn {
    Insn {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jeq(k: u32, jt: u8, jf: u8) -> Insn {
    Insn {
        code: JMP_JEQ_K,
        jt,
        jf,
        k,
    }
}

fn mask32(len: u8) -> u32 {
    match len.min(32) {
        0 => 0,
        len => u32::MAX << (32 - u32::from(len)),
    }
}

/// Mixes the key in A (multiply, fold the high half down, multiply) and returns a socket index
/// from the well-mixed middle bits: prefixes differ in their high bits, which a single multiply
/// never carries down.
fn mix_and_pick(sockets: u32) -> [Insn; 8] {
    [
        op(ALU_MUL_K, GOLDEN),
        op(MISC_TAX, 0),
        op(ALU_RSH_K, 15),
        op(ALU_XOR_X, 0),
        op(ALU_MUL_K, GOLDEN),
        op(ALU_RSH_K, 16),
        op(ALU_MOD_K, sockets),
        op(RET_A, 0),
    ]
}

/// The program for a group of `sockets`: steering by client prefix when the limiter is on,
/// otherwise a program that leaves every choice to the kernel.
pub fn program(ratelimit: &RateLimit, sockets: usize) -> Vec<Insn> {
    if !ratelimit.enabled() || sockets < 2 {
        return vec![op(RET_K, KERNEL_HASH)];
    }
    let sockets = sockets as u32;
    let (v4, v6): (Vec<&Prefix>, Vec<&Prefix>) = ratelimit
        .allowlist
        .iter()
        .take(MAX_EXEMPT)
        .partition(|p| p.parts().0.is_ipv4());
    let mut v4_block = Vec::new();
    for prefix in v4 {
        let (addr, len) = prefix.parts();
        let std::net::IpAddr::V4(addr) = addr else {
            continue;
        };
        v4_block.extend([
            op(LD_W_ABS, NET + 12),
            op(ALU_AND_K, mask32(len)),
            jeq(u32::from(addr) & mask32(len), 0, 1),
            op(RET_K, KERNEL_HASH),
        ]);
    }
    v4_block.extend([
        op(LD_W_ABS, NET + 12),
        op(ALU_AND_K, mask32(ratelimit.ipv4_prefix)),
    ]);
    v4_block.extend(mix_and_pick(sockets));
    let mut v6_block = Vec::new();
    for prefix in v6 {
        let (addr, len) = prefix.parts();
        let bits = match addr {
            std::net::IpAddr::V6(v6) => u128::from(v6),
            std::net::IpAddr::V4(_) => continue,
        };
        let (w0, w1) = ((bits >> 96) as u32, (bits >> 64) as u32);
        if len <= 32 {
            v6_block.extend([
                op(LD_W_ABS, NET + 8),
                op(ALU_AND_K, mask32(len)),
                jeq(w0 & mask32(len), 0, 1),
                op(RET_K, KERNEL_HASH),
            ]);
        } else {
            let m1 = mask32(len.min(64) - 32);
            v6_block.extend([
                op(LD_W_ABS, NET + 8),
                jeq(w0, 0, 4),
                op(LD_W_ABS, NET + 12),
                op(ALU_AND_K, m1),
                jeq(w1 & m1, 0, 1),
                op(RET_K, KERNEL_HASH),
            ]);
        }
    }
    let p6 = ratelimit.ipv6_prefix.min(64);
    v6_block.extend([
        op(LD_W_ABS, NET + 8),
        op(ALU_AND_K, mask32(p6)),
        op(ALU_MUL_K, GOLDEN),
        op(MISC_TAX, 0),
        op(LD_W_ABS, NET + 12),
        op(ALU_AND_K, mask32(p6.saturating_sub(32))),
        op(ALU_ADD_X, 0),
    ]);
    v6_block.extend(mix_and_pick(sockets));
    let mut program = vec![
        op(LD_B_ABS, NET),
        op(ALU_RSH_K, 4),
        // IPv4: skip the jump to the IPv6 block.
        jeq(4, 1, 0),
        op(JMP_JA, v4_block.len() as u32),
    ];
    program.extend(v4_block);
    program.extend(v6_block);
    program
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use super::*;

    /// Runs `program` the way the kernel would on a packet whose network header is `ip`.
    fn run(program: &[Insn], ip: &[u8]) -> u32 {
        let (mut a, mut x, mut pc) = (0u32, 0u32, 0usize);
        let load = |k: u32, size: usize| -> u32 {
            let at = k.wrapping_sub(NET) as usize;
            ip[at..at + size]
                .iter()
                .fold(0u32, |v, b| (v << 8) | u32::from(*b))
        };
        loop {
            let i = program[pc];
            pc += 1;
            match i.code {
                LD_W_ABS => a = load(i.k, 4),
                LD_B_ABS => a = load(i.k, 1),
                ALU_AND_K => a &= i.k,
                ALU_RSH_K => a >>= i.k,
                ALU_MUL_K => a = a.wrapping_mul(i.k),
                ALU_MOD_K => a %= i.k,
                ALU_ADD_X => a = a.wrapping_add(x),
                ALU_XOR_X => a ^= x,
                MISC_TAX => x = a,
                JMP_JA => pc += i.k as usize,
                JMP_JEQ_K => pc += usize::from(if a == i.k { i.jt } else { i.jf }),
                RET_K => return i.k,
                RET_A => return a,
                other => panic!("unknown opcode {other:#x}"),
            }
        }
    }

    fn packet(src: IpAddr) -> Vec<u8> {
        match src {
            IpAddr::V4(v4) => {
                let mut p = vec![0x45; 20];
                p[12..16].copy_from_slice(&v4.octets());
                p
            }
            IpAddr::V6(v6) => {
                let mut p = vec![0x60; 40];
                p[8..24].copy_from_slice(&v6.octets());
                p
            }
        }
    }

    fn limiter(allow: &[&str]) -> RateLimit {
        RateLimit {
            qps: 10,
            allowlist: allow.iter().map(|p| p.parse().unwrap()).collect(),
            ..RateLimit::default()
        }
    }

    fn core_of(program: &[Insn], src: &str) -> u32 {
        run(program, &packet(src.parse().unwrap()))
    }

    #[test]
    fn a_prefix_always_reaches_one_core_and_prefixes_spread() {
        let program = program(&limiter(&[]), 4);
        assert_eq!(
            core_of(&program, "192.0.2.1"),
            core_of(&program, "192.0.2.254")
        );
        assert_eq!(
            core_of(&program, "2001:db8:0:1::1"),
            core_of(&program, "2001:db8:0:ff:ffff::2"),
            "one /56"
        );
        let mut used = [0usize; 4];
        for i in 0..=255u8 {
            let core = core_of(&program, &format!("198.51.{i}.1"));
            assert!(core < 4);
            used[core as usize] += 1;
            let core = core_of(&program, &format!("2001:db8:{i:x}00::1"));
            used[core as usize] += 1;
        }
        assert!(
            used.iter().all(|&n| n > 64),
            "512 prefixes spread over 4 cores: {used:?}"
        );
    }

    #[test]
    fn allowlisted_prefixes_and_a_disabled_limiter_leave_the_choice_to_the_kernel() {
        let program = program(
            &limiter(&["10.0.0.0/8", "2001:db8::/32", "2001:db8:1:2::/64"]),
            4,
        );
        assert_eq!(core_of(&program, "10.1.2.3"), KERNEL_HASH);
        assert!(core_of(&program, "11.1.2.3") < 4);
        assert_eq!(core_of(&program, "2001:db8:ffff::1"), KERNEL_HASH);
        assert!(core_of(&program, "2001:db9::1") < 4);
        let narrow = super::program(&limiter(&["2001:db9:1:2::/64"]), 4);
        assert_eq!(core_of(&narrow, "2001:db9:1:2::9"), KERNEL_HASH);
        assert!(core_of(&narrow, "2001:db9:1:3::9") < 4);
        assert!(core_of(&narrow, "2001:db8:1:2::9") < 4);
        let off = super::program(&RateLimit::default(), 4);
        assert_eq!(core_of(&off, "192.0.2.1"), KERNEL_HASH);
        assert_eq!(
            super::program(&limiter(&[]), 1),
            off,
            "one core: nothing to steer"
        );
    }
}

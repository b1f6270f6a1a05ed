//! Faults at random moments while a runner works: dropped streams,
//! control-plane restarts, stalled (blackholed) connections and SIGKILLs,
//! each followed by waiting for the runner to connect again; and the loop
//! the soak and acknowledged-delivery tests share: waves of turns on every
//! thread, faults injected while they stream, each wave settled before the
//! next; and turns that prove in their workspace how far they got
//! ([`progress_script`]), so a test can tell which updates were produced
//! before a SIGKILL.
//!
//! Short by default so CI runs it quickly: `SOAK_ROUNDS` scales the fault
//! counts ([`rounds`]), and `SOAK_SEED` replays the random moments of an
//! earlier run ([`Rng`]; every test prints its seed).

use std::time::Duration;

use mock_control_plane::MockControlPlane;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::requests::{error_text, reply, send, turn_completed, user_message};
use crate::runner::{Kit, Plain, RunnerProc, WAIT};

/// Rounds of each fault kind (`SOAK_ROUNDS`, default 6).
pub fn rounds() -> usize {
    std::env::var("SOAK_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(6)
}

/// A small deterministic generator (xorshift64*): random moments without a
/// dependency, replayable with `SOAK_SEED`.
pub struct Rng(u64);

impl Rng {
    /// Seeded from `SOAK_SEED`, else the clock; prints `<test>: SOAK_SEED=…`.
    pub fn new(test: &str) -> Self {
        let seed = std::env::var("SOAK_SEED")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
            });
        println!("{test}: SOAK_SEED={seed}");
        Rng(seed | 1)
    }

    /// The next number.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..=max_ms` milliseconds.
    pub fn ms(&mut self, max_ms: u64) -> Duration {
        Duration::from_millis(self.next_u64() % (max_ms + 1))
    }
}

/// One fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The mock drops the live stream (when there is none, nothing happens).
    Drop,
    /// The control plane stops, stays down for `down`, and restarts.
    Restart {
        /// How long it stays down.
        down: Duration,
    },
    /// Every connection open through the [`BlackholeProxy`] stalls.
    Blackhole,
    /// The runner is SIGKILLed and started again on its state.
    Kill,
}

/// Injects faults into a runner and its mock control plane.
pub struct Faults<'a, K: Kit = Plain> {
    cp: &'a MockControlPlane,
    runner: &'a mut RunnerProc<K>,
    proxy: Option<&'a BlackholeProxy>,
    done: usize,
}

impl<'a, K: Kit> Faults<'a, K> {
    /// Faults for `runner`, connected to `cp`. A [`Fault::Kill`] replaces
    /// `runner` with its restart.
    pub fn new(cp: &'a MockControlPlane, runner: &'a mut RunnerProc<K>) -> Self {
        Self {
            cp,
            runner,
            proxy: None,
            done: 0,
        }
    }

    /// The runner connects through `proxy` (for [`Fault::Blackhole`]).
    pub fn through(mut self, proxy: &'a BlackholeProxy) -> Self {
        self.proxy = Some(proxy);
        self
    }

    /// Faults injected so far.
    pub fn done(&self) -> usize {
        self.done
    }

    /// Injects `fault` and waits until the runner has connected again
    /// (panics after [`WAIT`]); false when there was nothing to inject it
    /// into (no live stream to drop), and then it does not count.
    pub async fn inject(&mut self, fault: Fault) -> bool {
        let streams = self.cp.connection_count();
        match fault {
            Fault::Drop => {
                if !self.cp.drop_stream() {
                    return false;
                }
            }
            Fault::Restart { down } => {
                self.cp.stop().await.expect("stop");
                tokio::time::sleep(down).await;
                self.cp.restart().await.expect("restart");
            }
            Fault::Blackhole => self
                .proxy
                .expect("Fault::Blackhole needs Faults::through(proxy)")
                .blackhole(),
            Fault::Kill => {
                self.runner.signal(libc::SIGKILL);
                assert!(self.runner.wait_exit(WAIT).await.is_some(), "runner died");
                let restarted = self.runner.start_again();
                *self.runner = restarted;
            }
        }
        self.done += 1;
        self.cp
            .wait_for_connections(streams + 1, WAIT)
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "{fault:?} (fault {}): the runner did not connect again: {e:#}\n{}",
                    self.done,
                    self.runner.logs()
                )
            });
        true
    }

    /// Waves of `waves` turns until `plan.faults` faults happened, each
    /// wave: every thread takes a turn, `plan.per_wave` faults are tried at
    /// random moments while they run, the wave settles, and `after_wave`
    /// sees its request ids. The request ids of every wave's turns.
    pub async fn during_waves(
        &mut self,
        waves: &Waves<'_>,
        plan: &Plan,
        rng: &mut Rng,
        mut after_wave: impl FnMut(&[String]),
    ) -> Vec<String> {
        let first = self.done;
        let mut rids = Vec::new();
        let mut wave = 0;
        while self.done - first < plan.faults {
            let wave_rids = waves.send(self.cp, wave).await;
            for _ in 0..plan.per_wave {
                tokio::time::sleep(plan.pause + rng.ms(plan.jitter_ms)).await;
                let fault = (plan.fault)(self.done - first, rng);
                self.inject(fault).await;
            }
            waves.settle(self.cp, wave, &wave_rids).await;
            after_wave(&wave_rids);
            rids.extend(wave_rids);
            wave += 1;
        }
        rids
    }
}

/// How many faults, when, and which.
pub struct Plan {
    /// Waves go on until this many faults happened.
    pub faults: usize,
    /// Faults tried per wave (a drop with no live stream does not count).
    pub per_wave: usize,
    /// Before each fault: `pause` and up to `jitter_ms` more (random).
    pub pause: Duration,
    /// See `pause`.
    pub jitter_ms: u64,
    /// The fault to inject when `.0` faults have happened (random parts
    /// from the [`Rng`]).
    pub fault: fn(usize, &mut Rng) -> Fault,
}

/// How a wave ends before the next starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settle {
    /// Every turn of the wave completes.
    Completed,
    /// Every thread takes a follow-up turn (`say end`, request id
    /// `<prefix><wave>-end-t<i>`), which completes: the wave's turns are
    /// over, whether their own COMPLETED arrived or not.
    FollowUp,
    /// [`Settle::FollowUp`], sent again (`…-end-t<i>-<attempt>`) while the
    /// runner refuses it because the thread's turn still runs.
    FollowUpWhenFree,
}

/// Turns on every thread, one wave after another.
pub struct Waves<'a> {
    /// The threads' agent.
    pub agent: &'a str,
    /// Each takes one turn per wave.
    pub threads: &'a [String],
    /// What each turn runs.
    pub script: &'a str,
    /// Request ids are `<prefix><wave>-t<i>` (thread `i`).
    pub prefix: &'a str,
    /// How each wave ends.
    pub settle: Settle,
}

impl Waves<'_> {
    /// The request ids of wave `wave`.
    pub fn rids(&self, wave: usize) -> Vec<String> {
        (0..self.threads.len())
            .map(|i| format!("{}{wave}-t{i}", self.prefix))
            .collect()
    }

    /// Sends wave `wave`; its request ids.
    pub async fn send(&self, cp: &MockControlPlane, wave: usize) -> Vec<String> {
        let rids = self.rids(wave);
        for (rid, t) in rids.iter().zip(self.threads) {
            send(cp, rid, user_message(self.agent, t, self.script, false)).await;
        }
        rids
    }

    /// Waits until wave `wave` (request ids `rids`) is over ([`Settle`]).
    pub async fn settle(&self, cp: &MockControlPlane, wave: usize, rids: &[String]) {
        let end = |i: usize| format!("{}{wave}-end-t{i}", self.prefix);
        match self.settle {
            Settle::Completed => {
                for rid in rids {
                    turn_completed(cp, rid).await;
                }
            }
            Settle::FollowUp => {
                for (i, t) in self.threads.iter().enumerate() {
                    let r = end(i);
                    send(cp, &r, user_message(self.agent, t, "say end", false)).await;
                    turn_completed(cp, &r).await;
                }
            }
            Settle::FollowUpWhenFree => {
                for (i, t) in self.threads.iter().enumerate() {
                    for attempt in 0.. {
                        let r = format!("{}-{attempt}", end(i));
                        send(cp, &r, user_message(self.agent, t, "say end", false)).await;
                        let m = reply(cp, &r).await;
                        if error_text(&m).is_none() {
                            turn_completed(cp, &r).await;
                            break;
                        }
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            }
        }
    }
}

/// The marker file a [`progress_script`] turn appends to, in its workspace.
pub const PROGRESS: &str = "progress";

/// A turn that proves how far it got: `lines` times `say s<N>`, a pause of
/// `gap_ms`, then `run echo <N> >> progress`. A marker `N` in the file
/// means the turn had produced `say s0` … `say s<N>` at least `gap_ms`
/// before (an SDK hands its events over and goes on: a runner that is
/// behind has not taken the last ones yet; the gap gives it the time to
/// take them), so after a SIGKILL every one of them must still arrive: see
/// [`missing_before_marker`].
pub fn progress_script(lines: u32, gap_ms: u64) -> String {
    (0..lines)
        .map(|i| format!("say s{i}\nsleep {gap_ms}\nrun echo {i} >> {PROGRESS}\n"))
        .collect()
}

/// The last marker a [`progress_script`] turn wrote in `workspace` (`None`:
/// none yet), removing the file so the thread's next turn starts afresh.
pub fn take_progress(workspace: &std::path::Path) -> Option<u32> {
    let path = workspace.join(PROGRESS);
    let text = std::fs::read_to_string(&path).ok()?;
    std::fs::remove_file(&path).expect("remove the progress file");
    text.lines().rev().find_map(|l| l.trim().parse().ok())
}

/// The `say` lines of a [`progress_script`] turn produced before its last
/// marker `last` that are not among `said` (the texts of the turn's
/// COMPLETED agent messages the control plane processed): empty when every
/// one arrived.
pub fn missing_before_marker(last: Option<u32>, said: &[String]) -> Vec<u32> {
    let Some(last) = last else { return Vec::new() };
    (0..=last)
        .filter(|n| !said.contains(&format!("s{n}")))
        .collect()
}

/// A TCP proxy on loopback that can blackhole every connection open at the
/// time (no more bytes either way, nothing closed); new connections flow.
pub struct BlackholeProxy {
    /// Where it listens.
    pub addr: std::net::SocketAddr,
    stall: watch::Sender<u64>,
    close: CancellationToken,
}

impl BlackholeProxy {
    /// A proxy to `upstream`.
    pub async fn start(upstream: std::net::SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().expect("proxy addr");
        let (stall, _) = watch::channel(0u64);
        let close = CancellationToken::new();
        let (s, c) = (stall.clone(), close.clone());
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    a = listener.accept() => a,
                    () = c.cancelled() => return,
                };
                let Ok((down, _)) = accepted else { continue };
                let Ok(up) = TcpStream::connect(upstream).await else {
                    continue;
                };
                let _ = (down.set_nodelay(true), up.set_nodelay(true));
                let born = *s.borrow();
                let (dr, dw) = down.into_split();
                let (ur, uw) = up.into_split();
                tokio::spawn(pump(dr, uw, born, s.subscribe(), c.clone()));
                tokio::spawn(pump(ur, dw, born, s.subscribe(), c.clone()));
            }
        });
        Self { addr, stall, close }
    }

    /// `http://<addr>`: the URL to give the runner.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Freezes every connection open now.
    pub fn blackhole(&self) {
        self.stall.send_modify(|g| *g += 1);
    }
}

impl Drop for BlackholeProxy {
    fn drop(&mut self) {
        self.close.cancel();
    }
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    born: u64,
    mut stall: watch::Receiver<u64>,
    close: CancellationToken,
) {
    let mut buf = vec![0u8; 16 * 1024];
    while *stall.borrow() == born {
        tokio::select! {
            n = from.read(&mut buf) => match n {
                Ok(0) | Err(_) => {
                    let _ = to.shutdown().await;
                    return;
                }
                Ok(n) => {
                    if to.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            },
            _ = stall.changed() => {}
            () = close.cancelled() => return,
        }
    }
    // Blackholed: hold both ends open and move nothing, as a dead route would.
    close.cancelled().await;
}

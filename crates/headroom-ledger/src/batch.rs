//! Group commit: concurrent writes of one kind share a statement and a commit, so a busy ledger
//! pays one round of statements and one WAL flush for many writes instead of one each. Nobody
//! waits for a batch to fill: a caller whose write is waiting takes a batch of whatever waits
//! (its own included) as soon as a batch slot is free, runs it and answers every caller in it.
//! Alone, a write is a batch of one.
//!
//! A batch holds at most one write per key ([`Batched::batch_keys`]: the account and node of a
//! budget admission, the node of an appended event, the idempotency key of a capacity
//! request): a later one waits for the next batch,
//! so it sees the earlier committed, exactly as if each ran alone in arrival order.

use std::collections::{BTreeSet, VecDeque};
use std::sync::Mutex;

use async_trait::async_trait;
use tokio::sync::{Semaphore, oneshot};

use crate::LedgerError;

/// Writes in one batch at most: its statements stay well under every backend's parameter limit.
pub(crate) const BATCH_LIMIT: usize = 64;

/// The values one batch sends at most, in bytes ([`Batched::bytes`]): a statement whose values
/// pass one TLS record (16 KiB) leaves the socket in two writes, and sqlx 0.9.0 does not set
/// TCP_NODELAY on its sockets (sqlx issue 4335, fixed after that release), so the second write
/// waits for the server's delayed ACK, 40 ms. Measured: budget admissions of 32 clients over
/// TLS fell from about 4,000/s to 605/s with batches of 64 events (about 27 KiB). 2 KiB of the
/// record are left for the messages' headers and what an estimate misses (long open lists).
pub(crate) const BATCH_BYTES: usize = 14 * 1024;

/// What each bound value adds to a statement besides its own bytes ([`Batched::bytes`]): in
/// PostgreSQL's Bind message, a four-byte length word and a two-byte format code.
pub(crate) const BYTES_PER_VALUE: usize = 6;

/// Writes of one kind that may wait for a batch at once. Past it a write is refused at once
/// ([`LedgerError::Overloaded`]: the API answers 503 with Retry-After) rather than queued behind
/// work that would take the database seconds: a bound on memory and on every caller's wait.
/// At 64 writes a batch, this is 64 batches deep.
pub const MAX_WAITING: usize = 4096;

/// A write that can share a batch with others of its kind.
pub(crate) trait Batched: Send + 'static {
    /// Two writes with a key in common never share a batch.
    type Key: Ord;
    type Answer: Send + 'static;
    fn batch_keys(&self) -> impl IntoIterator<Item = Self::Key>;
    /// About how many bytes the write's values take in a statement ([`BATCH_BYTES`]).
    fn bytes(&self) -> usize;
}

pub(crate) type Answer<T> = Result<<T as Batched>::Answer, LedgerError>;

/// What writes a batch of `T`: an answer per write, in order, or an error for the whole batch.
/// Idempotent: a write may be written again after its answer was lost.
#[async_trait]
pub(crate) trait WriteBatch<T: Batched>: Sync {
    async fn write_batch(&self, writes: &[&T]) -> Result<Vec<Answer<T>>, LedgerError>;
}

/// A write waiting for a batch, and where its caller waits for the answer.
pub(crate) struct Waiting<T: Batched> {
    pub(crate) write: T,
    reply: oneshot::Sender<Answer<T>>,
}

impl<T: Batched> Waiting<T> {
    /// Sends the answer; a caller that went away needs none.
    pub(crate) fn answer(self, answer: Answer<T>) {
        let _ = self.reply.send(answer);
    }
}

/// The writes of one kind waiting for a batch, and the batch slots.
pub(crate) struct Batches<T: Batched> {
    waiting: Mutex<VecDeque<Waiting<T>>>,
    slots: Semaphore,
}

impl<T: Batched> std::fmt::Debug for Batches<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batches")
            .field("waiting", &self.lock().len())
            .field("free_slots", &self.slots.available_permits())
            .finish()
    }
}

impl<T: Batched> Batches<T> {
    /// `slots` batches may run at once: more than one lets a batch gather while another
    /// commits, where the database lets writers overlap.
    pub(crate) fn new(slots: usize) -> Self {
        Batches {
            waiting: Mutex::new(VecDeque::new()),
            slots: Semaphore::new(slots.max(1)),
        }
    }

    /// Queues `write`, unless [`MAX_WAITING`] writes already wait.
    fn enqueue(&self, write: T) -> Result<oneshot::Receiver<Answer<T>>, LedgerError> {
        let (reply, answer) = oneshot::channel();
        let mut waiting = self.lock();
        if waiting.len() >= MAX_WAITING {
            // Callers that gave up still count until a batch drops them: drop them now.
            waiting.retain(|w| !w.reply.is_closed());
            if waiting.len() >= MAX_WAITING {
                return Err(LedgerError::Overloaded(waiting.len()));
            }
        }
        waiting.push_back(Waiting { write, reply });
        Ok(answer)
    }

    /// The next batch: the oldest waiting writes whose callers still wait, at most one per key,
    /// up to [`BATCH_LIMIT`] writes and [`BATCH_BYTES`] (a write larger than that goes alone).
    /// Writes whose callers gave up are dropped unwritten.
    fn next_batch(&self) -> Vec<Waiting<T>> {
        let mut waiting = self.lock();
        let mut batch: Vec<Waiting<T>> = Vec::new();
        let mut keys = BTreeSet::new();
        let mut bytes = 0;
        let mut later = VecDeque::new();
        while let Some(w) = waiting.pop_front() {
            if w.reply.is_closed() {
                continue;
            }
            let mine: Vec<T::Key> = w.write.batch_keys().into_iter().collect();
            let fits = batch.is_empty()
                || (batch.len() < BATCH_LIMIT && bytes + w.write.bytes() <= BATCH_BYTES);
            if fits && mine.iter().all(|k| !keys.contains(k)) {
                keys.extend(mine);
                bytes += w.write.bytes();
                batch.push(w);
            } else {
                later.push_back(w);
            }
        }
        *waiting = later;
        batch
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Waiting<T>>> {
        // A panic elsewhere while the queue was held leaves it whole: every change above is a
        // single push or a swap.
        self.waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Writes `write` in a batch and returns its answer: waits for it, running batches (its own
    /// or others') whenever a slot is free and writes wait. `run` writes a batch and returns an
    /// answer per write, in order. When a batch fails as a whole, each of its writes is run
    /// alone, so a write the database refuses fails only its own caller; and when the caller
    /// running a batch went away before answering (its transaction then rolled back, or
    /// committed unacknowledged), the write is run alone again. `run` must therefore be
    /// idempotent.
    pub(crate) async fn write<R: WriteBatch<T>>(&self, write: T, run: &R) -> Answer<T>
    where
        T: Clone,
    {
        let mut answer = self.enqueue(write.clone())?;
        loop {
            tokio::select! {
                biased;
                answered = &mut answer => return match answered {
                    Ok(answer) => answer,
                    Err(_) => alone(&write, run).await,
                },
                slot = self.slots.acquire() => {
                    // The semaphore is never closed; were it, writing alone is still right.
                    let Ok(_slot) = slot else {
                        return alone(&write, run).await;
                    };
                    let batch = self.next_batch();
                    if batch.is_empty() {
                        // Ours is in a batch another caller runs: its answer is coming.
                        drop(_slot);
                        return match (&mut answer).await {
                            Ok(answer) => answer,
                            Err(_) => alone(&write, run).await,
                        };
                    }
                    settle(batch, run).await;
                }
            }
        }
    }
}

/// `write` as a batch of its own.
async fn alone<T: Batched, R: WriteBatch<T>>(write: &T, run: &R) -> Answer<T> {
    run.write_batch(&[write])
        .await?
        .pop()
        .unwrap_or_else(|| Err(LedgerError::Corrupt("a batch lost its answer".into())))
}

/// Runs `batch` and answers every caller in it; if it fails as a whole, each write alone.
async fn settle<T: Batched, R: WriteBatch<T>>(batch: Vec<Waiting<T>>, run: &R) {
    let answers = {
        let writes: Vec<&T> = batch.iter().map(|w| &w.write).collect();
        run.write_batch(&writes).await
    };
    match answers {
        Ok(answers) if answers.len() == batch.len() => {
            for (w, answer) in batch.into_iter().zip(answers) {
                w.answer(answer);
            }
        }
        Err(error) if batch.len() == 1 => {
            if let Some(w) = batch.into_iter().next() {
                w.answer(Err(error));
            }
        }
        _ => {
            for w in batch {
                let answer = alone(&w.write, run).await;
                w.answer(answer);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Write(&'static str, &'static str);

    impl Batched for Write {
        type Key = &'static str;
        type Answer = ();
        fn batch_keys(&self) -> impl IntoIterator<Item = &'static str> {
            [self.0]
        }
        fn bytes(&self) -> usize {
            self.1.len()
        }
    }

    fn names(batch: &[Waiting<Write>]) -> Vec<&str> {
        batch.iter().map(|w| w.write.1).collect()
    }

    #[test]
    fn a_batch_takes_one_write_per_key_in_arrival_order_and_skips_callers_gone() {
        let batches = Batches::new(1);
        let _a1 = batches.enqueue(Write("a", "a1")).unwrap();
        let _a2 = batches.enqueue(Write("a", "a2")).unwrap();
        let gone = batches.enqueue(Write("b", "b1")).unwrap();
        let _b2 = batches.enqueue(Write("b", "b2")).unwrap();
        let _c1 = batches.enqueue(Write("c", "c1")).unwrap();
        let _a3 = batches.enqueue(Write("a", "a3")).unwrap();
        drop(gone);
        assert_eq!(names(&batches.next_batch()), ["a1", "b2", "c1"]);
        assert_eq!(names(&batches.next_batch()), ["a2"]);
        assert_eq!(names(&batches.next_batch()), ["a3"]);
        assert!(batches.next_batch().is_empty());
    }

    #[test]
    fn a_batch_holds_at_most_its_bytes_and_a_larger_write_goes_alone() {
        let batches = Batches::new(1);
        let big: &'static str = Box::leak("x".repeat(BATCH_BYTES / 3).into_boxed_str());
        let huge: &'static str = Box::leak("y".repeat(BATCH_BYTES + 1).into_boxed_str());
        let _answers: Vec<_> = [("a", big), ("b", big), ("c", big), ("d", big)]
            .into_iter()
            .chain([("e", huge), ("f", big)])
            .map(|(k, payload)| batches.enqueue(Write(k, payload)).unwrap())
            .collect();
        let names =
            |batch: Vec<Waiting<Write>>| -> Vec<&str> { batch.iter().map(|w| w.write.0).collect() };
        assert_eq!(names(batches.next_batch()), ["a", "b", "c"]);
        assert_eq!(
            names(batches.next_batch()),
            ["d", "f"],
            "e does not fit beside d"
        );
        assert_eq!(names(batches.next_batch()), ["e"], "alone");
    }

    #[test]
    fn a_batch_holds_at_most_the_limit() {
        let batches = Batches::new(1);
        let keys: Vec<&'static str> = (0..BATCH_LIMIT + 3)
            .map(|n| &*Box::leak(format!("k{n}").into_boxed_str()))
            .collect();
        let answers: Vec<_> = keys
            .iter()
            .map(|k| batches.enqueue(Write(k, k)).unwrap())
            .collect();
        assert_eq!(batches.next_batch().len(), BATCH_LIMIT);
        assert_eq!(names(&batches.next_batch()), ["k64", "k65", "k66"]);
        drop(answers);
    }

    /// Many callers at once, each answered with its own write's answer, whoever ran its batch.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn every_caller_gets_its_own_answer() {
        #[derive(Debug, Clone)]
        struct Double(u32);
        impl Batched for Double {
            type Key = u32;
            type Answer = u32;
            fn batch_keys(&self) -> impl IntoIterator<Item = u32> {
                [self.0]
            }
            fn bytes(&self) -> usize {
                4
            }
        }
        struct Doubler;
        #[async_trait]
        impl WriteBatch<Double> for Doubler {
            async fn write_batch(
                &self,
                batch: &[&Double],
            ) -> Result<Vec<Answer<Double>>, LedgerError> {
                tokio::task::yield_now().await;
                Ok(batch.iter().map(|d| Ok(d.0 * 2)).collect())
            }
        }
        let batches = std::sync::Arc::new(Batches::<Double>::new(2));
        let mut tasks = tokio::task::JoinSet::new();
        for n in 0..200u32 {
            let batches = batches.clone();
            tasks.spawn(async move {
                let answer = batches.write(Double(n), &Doubler).await;
                (n, answer.unwrap())
            });
        }
        while let Some(done) = tasks.join_next().await {
            let (n, doubled) = done.unwrap();
            assert_eq!(doubled, n * 2);
        }
    }

    #[test]
    fn past_the_bound_a_write_is_refused_at_once_and_callers_gone_make_room() {
        let batches = Batches::new(1);
        let keys: Vec<&'static str> = (0..=MAX_WAITING)
            .map(|n| &*Box::leak(format!("k{n}").into_boxed_str()))
            .collect();
        let mut answers: Vec<_> = keys[..MAX_WAITING]
            .iter()
            .map(|k| batches.enqueue(Write(k, k)).unwrap())
            .collect();
        let refused = batches.enqueue(Write(keys[MAX_WAITING], "late"));
        assert!(
            matches!(refused, Err(LedgerError::Overloaded(n)) if n == MAX_WAITING),
            "{refused:?}"
        );
        // A caller that gave up frees its place.
        answers.truncate(MAX_WAITING - 1);
        assert!(batches.enqueue(Write(keys[MAX_WAITING], "late")).is_ok());
    }
}

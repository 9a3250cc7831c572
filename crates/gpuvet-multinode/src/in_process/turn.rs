//! Whose turn it is to serve one node of a group in one process: at most one worker
//! at a time, so the node's messages are answered in order; and no message left
//! unanswered, though it may come while a worker is finishing its turn.

use std::sync::atomic::{AtomicU8, Ordering};

/// No worker has the node, nor will until something comes.
const FREE: u8 = 0;
/// A job to serve the node is queued.
const QUEUED: u8 = 1;
/// A worker has the node.
const TAKEN: u8 = 2;
/// A worker has the node, and more came since it last looked.
const TAKEN_AGAIN: u8 = 3;

#[derive(Debug)]
pub(super) struct Turn(AtomicU8);

impl Turn {
    /// A node whose first job (its join) is queued: that job has the turn.
    pub(super) fn taken() -> Turn {
        Turn(AtomicU8::new(TAKEN))
    }

    /// Something came for the node; `true` when the caller is to queue a job for it.
    /// Otherwise a job is queued already, or the worker that has the node looks again
    /// before it ends its turn.
    pub(super) fn something_came(&self) -> bool {
        let mut now = self.0.load(Ordering::SeqCst);
        loop {
            let next = match now {
                FREE => QUEUED,
                TAKEN => TAKEN_AGAIN,
                _ => return false,
            };
            match self
                .0
                .compare_exchange(now, next, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => return now == FREE,
                Err(changed) => now = changed,
            }
        }
    }

    /// The queued job starts: its worker has the node.
    pub(super) fn take_queued(&self) {
        // Nothing else moves a queued turn.
        self.0.store(TAKEN, Ordering::SeqCst);
    }

    /// The worker has answered everything it saw; `true` when the turn is over,
    /// `false` when more came meanwhile and the worker must look again.
    pub(super) fn end(&self) -> bool {
        match self
            .0
            .compare_exchange(TAKEN, FREE, Ordering::SeqCst, Ordering::SeqCst)
        {
            Ok(_) => true,
            Err(_) => {
                // TAKEN_AGAIN: `something_came` moves a taken turn only to that.
                self.0.store(TAKEN, Ordering::SeqCst);
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;
    use std::sync::{Arc, Mutex};

    use super::*;

    #[test]
    fn what_comes_while_a_worker_has_the_node_is_seen_in_the_same_turn() {
        let turn = Turn::taken();
        assert!(!turn.something_came(), "the join's worker looks again");
        assert!(!turn.something_came());
        assert!(!turn.end(), "more came during the turn");
        assert!(turn.end());
    }

    #[test]
    fn a_free_node_is_queued_once_however_much_comes() {
        let turn = Turn::taken();
        assert!(turn.end());
        assert!(turn.something_came(), "the first arrival queues a job");
        assert!(!turn.something_came(), "it is queued already");
        turn.take_queued();
        assert!(turn.end());
        assert!(turn.something_came(), "free again, so queued again");
    }

    /// Messages arrive on one thread while workers take turns on others: every
    /// message is answered, in order, by one worker at a time.
    #[test]
    fn every_message_is_answered_once_in_order_by_one_worker_at_a_time() {
        const MESSAGES: usize = 20_000;
        const BURST: usize = 4;
        let turn = Arc::new(Turn::taken());
        let inbox = Arc::new(Mutex::new(std::collections::VecDeque::new()));
        let answered = Arc::new(Mutex::new(Vec::with_capacity(MESSAGES)));
        let queued = Arc::new(Mutex::new(0usize));
        let serving = Arc::new(AtomicUsize::new(0));
        // A worker's turn: answer what is in the inbox, until the turn ends.
        let take_turn = {
            let (turn, inbox, answered, serving) = (
                Arc::clone(&turn),
                Arc::clone(&inbox),
                Arc::clone(&answered),
                Arc::clone(&serving),
            );
            move || loop {
                assert_eq!(serving.fetch_add(1, Ordering::SeqCst), 0, "two workers");
                while let Some(message) = inbox.lock().unwrap().pop_front() {
                    answered.lock().unwrap().push(message);
                }
                serving.fetch_sub(1, Ordering::SeqCst);
                // A gap between the last look and the end, for a message to fall in.
                std::thread::yield_now();
                if turn.end() {
                    return;
                }
            }
        };
        let workers: Vec<_> = (0..3)
            .map(|_| {
                let (turn, queued, take_turn) =
                    (Arc::clone(&turn), Arc::clone(&queued), take_turn.clone());
                std::thread::spawn(move || {
                    while running(&queued) {
                        let job = {
                            let mut queued = queued.lock().unwrap();
                            if *queued > 0 {
                                *queued -= 1;
                                true
                            } else {
                                false
                            }
                        };
                        if job {
                            turn.take_queued();
                            take_turn();
                        } else {
                            std::thread::yield_now();
                        }
                    }
                })
            })
            .collect();
        // The join's turn.
        take_turn();
        // In bursts, each waited out: the end of each burst is a message that may
        // come just as a worker ends its turn. One left unanswered would leave this
        // waiting: fail instead.
        let give_up = std::time::Instant::now() + std::time::Duration::from_secs(60);
        for burst in (0..MESSAGES).collect::<Vec<_>>().chunks(BURST) {
            for &message in burst {
                inbox.lock().unwrap().push_back(message);
                if turn.something_came() {
                    *queued.lock().unwrap() += 1;
                }
            }
            while answered.lock().unwrap().len() < burst[burst.len() - 1] + 1 {
                assert!(
                    std::time::Instant::now() < give_up,
                    "a message was left unanswered"
                );
                std::thread::yield_now();
            }
        }
        *queued.lock().unwrap() = usize::MAX;
        for worker in workers {
            worker.join().unwrap();
        }
        let answered = answered.lock().unwrap();
        assert!(answered.iter().copied().eq(0..MESSAGES));
        assert!(inbox.lock().unwrap().is_empty());
    }

    /// Workers run until the test sets the queue to `usize::MAX`.
    fn running(queued: &Mutex<usize>) -> bool {
        *queued.lock().unwrap() != usize::MAX
    }
}

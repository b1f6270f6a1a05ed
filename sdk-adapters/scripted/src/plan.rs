//! A turn's queue of what is left to do, and where steering joins it.
//!
//! The turn starts with its message's steps. A steering message accepted
//! while a step runs is inserted right after that step, before the steps
//! that were still waiting: first a marker (the turn reports `Steered` and the
//! steering text as a `USER_MESSAGE` item there), then the steering text's own
//! steps. Several messages inserted at the same boundary keep the order in
//! which they were accepted.

use std::collections::VecDeque;

use crate::script::{self, ScriptError, Step};

/// A steering message accepted by `TurnControl::steer`, not yet in the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Steering {
    pub text: String,
    pub tag: u64,
}

/// One thing the turn does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Entry {
    /// A steering message joins the turn here.
    Steering(Steering),
    /// A step of the first message, or of a steering message (`steered`).
    Step {
        step: Result<Step, ScriptError>,
        steered: bool,
    },
}

impl Entry {
    /// Whether running this entry certainly ends the turn, so the turn can be
    /// marked ended before it runs (a later steer is then refused instead of
    /// being accepted and never run).
    pub(crate) fn ends_turn(&self) -> bool {
        matches!(
            self,
            Entry::Step {
                step: Err(_) | Ok(Step::Fail(_)),
                ..
            }
        )
    }
}

/// The remaining entries, in order.
#[derive(Debug, Default)]
pub(crate) struct Plan {
    entries: VecDeque<Entry>,
}

impl Plan {
    /// The steps of the message that starts the turn.
    pub(crate) fn from_message(text: &str) -> Self {
        Self {
            entries: steps(text, false).collect(),
        }
    }

    /// Put accepted steering messages (oldest first) before everything left.
    pub(crate) fn insert_steering(&mut self, messages: Vec<Steering>) {
        for message in messages.into_iter().rev() {
            let steps: Vec<Entry> = steps(&message.text, true).collect();
            for step in steps.into_iter().rev() {
                self.entries.push_front(step);
            }
            self.entries.push_front(Entry::Steering(message));
        }
    }

    /// Take the next entry.
    pub(crate) fn pop(&mut self) -> Option<Entry> {
        self.entries.pop_front()
    }
}

fn steps(text: &str, steered: bool) -> impl Iterator<Item = Entry> {
    script::parse(text)
        .into_iter()
        .map(move |step| Entry::Step { step, steered })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn say(text: &str, steered: bool) -> Entry {
        Entry::Step {
            step: Ok(Step::Say(text.into())),
            steered,
        }
    }

    fn steering(text: &str, tag: u64) -> Steering {
        Steering {
            text: text.into(),
            tag,
        }
    }

    fn drain(plan: &mut Plan) -> Vec<Entry> {
        std::iter::from_fn(|| plan.pop()).collect()
    }

    #[test]
    fn steering_goes_before_the_remaining_steps() {
        let mut plan = Plan::from_message("say a\nsay b\nsay c");
        assert_eq!(plan.pop(), Some(say("a", false)));
        plan.insert_steering(vec![steering("say x\nsay y", 1), steering("say z", 2)]);
        assert_eq!(
            drain(&mut plan),
            vec![
                Entry::Steering(steering("say x\nsay y", 1)),
                say("x", true),
                say("y", true),
                Entry::Steering(steering("say z", 2)),
                say("z", true),
                say("b", false),
                say("c", false),
            ]
        );
    }

    #[test]
    fn steering_into_steering() {
        let mut plan = Plan::from_message("say a\nsay b");
        assert_eq!(plan.pop(), Some(say("a", false)));
        plan.insert_steering(vec![steering("say x\nsay y", 1)]);
        assert_eq!(
            plan.pop(),
            Some(Entry::Steering(steering("say x\nsay y", 1)))
        );
        assert_eq!(plan.pop(), Some(say("x", true)));
        plan.insert_steering(vec![steering("say z", 2)]);
        assert_eq!(
            drain(&mut plan),
            vec![
                Entry::Steering(steering("say z", 2)),
                say("z", true),
                say("y", true),
                say("b", false),
            ]
        );
    }

    #[test]
    fn empty_steering_is_just_its_marker() {
        let mut plan = Plan::default();
        plan.insert_steering(vec![steering("\n  \n", 3)]);
        assert_eq!(
            drain(&mut plan),
            vec![Entry::Steering(steering("\n  \n", 3))]
        );
    }

    #[test]
    fn failing_entries_end_the_turn() {
        let mut plan = Plan::from_message("fail x\nsleep x\nsay x");
        let ends: Vec<bool> = drain(&mut plan).iter().map(Entry::ends_turn).collect();
        assert_eq!(ends, vec![true, true, false]);
        assert!(!Entry::Steering(steering("fail x", 1)).ends_turn());
    }
}

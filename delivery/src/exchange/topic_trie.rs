//! The topic exchange's binding trie: binding keys stored word by word, `*` and `#` as edges.
//!
//! Matching walks the routing key's words through the trie once, so its cost grows with the
//! key's length and the wildcards on the path, not with the number of bindings. Semantics are
//! RabbitMQ's: words are separated by `.`, empty words count (`a..b` has three), the empty key
//! has no words, `*` matches exactly one word and `#` zero or more.

use std::collections::HashMap;

const STAR: &str = "*";
const HASH: &str = "#";

/// Splits a key into words the way RabbitMQ does: "" has none, "a." has two.
fn words(key: &str) -> impl Iterator<Item = &str> {
    let empty = key.is_empty();
    key.split('.').filter(move |_| !empty)
}

/// A trie of topic binding keys, each leading to a set of destinations.
#[derive(Debug, Clone)]
pub struct TopicTrie<D> {
    root: Node<D>,
}

#[derive(Debug, Clone)]
struct Node<D> {
    words: HashMap<Box<str>, Node<D>>,
    star: Option<Box<Node<D>>>,
    hash: Option<Box<Node<D>>>,
    destinations: Vec<D>,
}

impl<D> Default for Node<D> {
    fn default() -> Self {
        Node { words: HashMap::new(), star: None, hash: None, destinations: Vec::new() }
    }
}

impl<D> Default for TopicTrie<D> {
    fn default() -> Self {
        TopicTrie { root: Node::default() }
    }
}

impl<D: Clone + PartialEq> TopicTrie<D> {
    /// Adds `destination` under `binding_key`; a duplicate is ignored.
    pub fn insert(&mut self, binding_key: &str, destination: D) {
        let mut node = &mut self.root;
        for word in words(binding_key) {
            node = match word {
                STAR => node.star.get_or_insert_with(Default::default),
                HASH => node.hash.get_or_insert_with(Default::default),
                _ => node.words.entry(word.into()).or_default(),
            };
        }
        if !node.destinations.contains(&destination) {
            node.destinations.push(destination);
        }
    }

    /// Removes `destination` from `binding_key`; returns whether it was there.
    pub fn remove(&mut self, binding_key: &str, destination: &D) -> bool {
        let path: Vec<&str> = words(binding_key).collect();
        Self::remove_at(&mut self.root, &path, destination)
    }

    fn remove_at(node: &mut Node<D>, path: &[&str], destination: &D) -> bool {
        let Some((word, rest)) = path.split_first() else {
            let before = node.destinations.len();
            node.destinations.retain(|d| d != destination);
            return node.destinations.len() != before;
        };
        let removed = match *word {
            STAR => Self::remove_in_child(&mut node.star, rest, destination),
            HASH => Self::remove_in_child(&mut node.hash, rest, destination),
            _ => match node.words.get_mut(*word) {
                Some(child) => {
                    let removed = Self::remove_at(child, rest, destination);
                    if child.is_empty() {
                        node.words.remove(*word);
                    }
                    removed
                }
                None => false,
            },
        };
        removed
    }

    fn remove_in_child(child: &mut Option<Box<Node<D>>>, rest: &[&str], destination: &D) -> bool {
        let Some(node) = child else { return false };
        let removed = Self::remove_at(node, rest, destination);
        if node.is_empty() {
            *child = None;
        }
        removed
    }

    /// Appends to `out` every destination whose binding key matches `routing_key`.
    /// A destination bound under several matching keys appears once per key.
    pub fn matches(&self, routing_key: &str, out: &mut Vec<D>) {
        let key: Vec<&str> = words(routing_key).collect();
        self.root.collect(&key, out);
    }

    /// True when nothing is bound.
    pub fn is_empty(&self) -> bool {
        self.root.is_empty()
    }
}

impl<D: Clone> Node<D> {
    fn is_empty(&self) -> bool {
        self.destinations.is_empty() && self.words.is_empty() && self.star.is_none() && self.hash.is_none()
    }

    fn collect(&self, key: &[&str], out: &mut Vec<D>) {
        if let Some(hash) = &self.hash {
            // `#` swallows zero or more words: try every suffix.
            for skip in 0..=key.len() {
                hash.collect(&key[skip..], out);
            }
        }
        let Some((word, rest)) = key.split_first() else {
            out.extend(self.destinations.iter().cloned());
            return;
        };
        if let Some(child) = self.words.get(*word) {
            child.collect(rest, out);
        }
        if let Some(star) = &self.star {
            star.collect(rest, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The reference: a direct recursive match of pattern words against key words.
    fn naive_match(pattern: &[&str], key: &[&str]) -> bool {
        match pattern.split_first() {
            None => key.is_empty(),
            Some((&"#", rest)) => (0..=key.len()).any(|skip| naive_match(rest, &key[skip..])),
            Some((&"*", rest)) => !key.is_empty() && naive_match(rest, &key[1..]),
            Some((word, rest)) => key.first() == Some(word) && naive_match(rest, &key[1..]),
        }
    }

    fn matched(trie: &TopicTrie<u32>, key: &str) -> Vec<u32> {
        let mut out = Vec::new();
        trie.matches(key, &mut out);
        out.sort_unstable();
        out.dedup();
        out
    }

    #[test]
    fn rabbitmq_examples() {
        let mut trie = TopicTrie::default();
        for (id, key) in ["*.orange.*", "*.*.rabbit", "lazy.#", "#", "", "a.*.#"].iter().enumerate() {
            trie.insert(key, id as u32);
        }
        assert_eq!(matched(&trie, "quick.orange.rabbit"), vec![0, 1, 3]);
        assert_eq!(matched(&trie, "lazy.orange.elephant"), vec![0, 2, 3]);
        assert_eq!(matched(&trie, "lazy"), vec![2, 3]);
        assert_eq!(matched(&trie, ""), vec![3, 4]);
        assert_eq!(matched(&trie, "a"), vec![3]);
        assert_eq!(matched(&trie, "a.b"), vec![3, 5]);
        assert_eq!(matched(&trie, "quick.orange.male.rabbit"), vec![3]);
    }

    #[test]
    fn remove_prunes_and_reports() {
        let mut trie = TopicTrie::default();
        trie.insert("a.*.c", 1);
        trie.insert("a.#", 2);
        assert!(trie.remove("a.*.c", &1));
        assert!(!trie.remove("a.*.c", &1));
        assert_eq!(matched(&trie, "a.b.c"), vec![2]);
        assert!(trie.remove("a.#", &2));
        assert!(trie.is_empty());
    }

    fn word() -> impl Strategy<Value = String> {
        prop_oneof![Just("a".to_string()), Just("b".to_string()), Just(String::new())]
    }

    fn pattern_word() -> impl Strategy<Value = String> {
        prop_oneof![word(), Just("*".to_string()), Just("#".to_string())]
    }

    proptest! {
        #[test]
        fn trie_agrees_with_naive_matcher(
            patterns in prop::collection::vec(prop::collection::vec(pattern_word(), 0..5), 1..8),
            keys in prop::collection::vec(prop::collection::vec(word(), 0..6), 1..8),
            removed in prop::collection::vec(any::<bool>(), 8),
        ) {
            let mut trie = TopicTrie::default();
            let patterns: Vec<String> = patterns.iter().map(|p| p.join(".")).collect();
            for (id, pattern) in patterns.iter().enumerate() {
                trie.insert(pattern, id as u32);
            }
            for (id, pattern) in patterns.iter().enumerate() {
                if removed[id] {
                    prop_assert!(trie.remove(pattern, &(id as u32)));
                }
            }
            for key in keys.iter().map(|k| k.join(".")) {
                let key_words: Vec<&str> = words(&key).collect();
                let expected: Vec<u32> = patterns
                    .iter()
                    .enumerate()
                    .filter(|(id, p)| {
                        let pw: Vec<&str> = words(p).collect();
                        !removed[*id] && naive_match(&pw, &key_words)
                    })
                    .map(|(id, _)| id as u32)
                    .collect();
                prop_assert_eq!(matched(&trie, &key), expected, "key {:?}", key);
            }
        }
    }
}

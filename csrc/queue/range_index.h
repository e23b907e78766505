/*
 * range_index.h - the drain's index of one lane's pending FREEs by address
 * range: "which is the earliest FREE of this lane, not yet handed out, that
 * overlaps [lo, hi)?" (event_drain.c asks it of every other lane with FREEs
 * pending before it hands out an ALLOC).
 *
 * An AVL tree keyed by (start, index), each node carrying the largest end
 * and the smallest lane index in its subtree: a query visits only subtrees
 * that can overlap and can hold an earlier FREE than the best found, so it
 * costs O(log n) even where thousands of pending FREEs share one address
 * (a pool reusing it while the consumer is behind).  Pending FREEs overlap
 * each other (generations of one range), so a plain sorted map would not
 * do.  Nodes come from one pool grown in blocks and never given back
 * (bounded by the most FREEs ever pending at once).
 *
 * Consumer side only: every call is made with the queue's consumer lock
 * held (malloc is fine here: no hook waits for this lock).
 */
#ifndef MEMHOOK_RANGE_INDEX_H
#define MEMHOOK_RANGE_INDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mh_visibility.h"

/* One pending FREE. */
typedef struct mh_range_item {
    uint64_t start, end;  /* [start, end): end > start */
    uint64_t index;       /* its index in its lane */
    uint64_t link;        /* its link (the event's seq while pending) */
    uint64_t key;         /* its timestamp in ns */
    uint32_t flags;       /* the event's flags, private bits included */
} mh_range_item;

typedef struct mh_range_node mh_range_node;
typedef struct mh_range_tree {
    mh_range_node *root;
    size_t count;
} mh_range_tree;

/* Add an item; false when out of memory (the caller logs it: the drain's
 * causal rules then miss this FREE). */
MH_HIDDEN bool mh_range_insert(mh_range_tree *t, const mh_range_item *item);
/* Remove the item (start, index); false if it is not there. */
MH_HIDDEN bool mh_range_remove(mh_range_tree *t, uint64_t start, uint64_t index);
/* The item with the smallest index among those overlapping [lo, hi) that
 * start in [sa, sb) and have an index of at least min_index: true and
 * *out, or false when there is none.  O(log n) but for items passed over
 * by min_index. */
MH_HIDDEN bool mh_range_first(const mh_range_tree *t, uint64_t lo, uint64_t hi, uint64_t sa,
                              uint64_t sb, uint64_t min_index, mh_range_item *out);

#endif

/*
 * range_index.c - an AVL interval tree of pending FREEs (range_index.h).
 */
#include <stdlib.h>

#include "range_index.h"

typedef struct mh_range_node node;
struct mh_range_node {
    mh_range_item item;
    node *left, *right;
    uint64_t max_end;    /* the largest item.end in this subtree */
    uint64_t min_start;  /* the smallest item.start in this subtree */
    uint64_t min_index;  /* the smallest item.index in this subtree */
    int height;
};

/* Consumer state (under the queue's consumer lock): the nodes not in use,
 * for every lane's tree (one pool per process, like the queue). */
static node *g_free;

#define POOL_BLOCK 1024

static node *node_new(void)
{
    if (g_free == NULL) {
        node *block = malloc(POOL_BLOCK * sizeof *block);
        if (block == NULL)
            return NULL;
        for (size_t i = 0; i < POOL_BLOCK; i++) {
            block[i].left = g_free;
            g_free = &block[i];
        }
    }
    node *n = g_free;
    g_free = n->left;
    return n;
}

static void node_free(node *n)
{
    n->left = g_free;
    g_free = n;
}

static int height(const node *n) { return n != NULL ? n->height : 0; }

static void fix(node *n)
{
    int hl = height(n->left), hr = height(n->right);
    n->height = (hl > hr ? hl : hr) + 1;
    uint64_t m = n->item.end, i = n->item.index;
    n->min_start = n->left != NULL ? n->left->min_start : n->item.start;
    if (n->left != NULL) {
        m = n->left->max_end > m ? n->left->max_end : m;
        i = n->left->min_index < i ? n->left->min_index : i;
    }
    if (n->right != NULL) {
        m = n->right->max_end > m ? n->right->max_end : m;
        i = n->right->min_index < i ? n->right->min_index : i;
    }
    n->max_end = m;
    n->min_index = i;
}

static node *rotate_right(node *n)
{
    node *l = n->left;
    n->left = l->right;
    l->right = n;
    fix(n);
    fix(l);
    return l;
}

static node *rotate_left(node *n)
{
    node *r = n->right;
    n->right = r->left;
    r->left = n;
    fix(n);
    fix(r);
    return r;
}

static node *balance(node *n)
{
    fix(n);
    int d = height(n->left) - height(n->right);
    if (d > 1) {
        if (height(n->left->left) < height(n->left->right))
            n->left = rotate_left(n->left);
        return rotate_right(n);
    }
    if (d < -1) {
        if (height(n->right->right) < height(n->right->left))
            n->right = rotate_right(n->right);
        return rotate_left(n);
    }
    return n;
}

/* Order by start, then index: (start, index) is unique in a lane. */
static int cmp(uint64_t start, uint64_t index, const node *n)
{
    if (start != n->item.start)
        return start < n->item.start ? -1 : 1;
    if (index != n->item.index)
        return index < n->item.index ? -1 : 1;
    return 0;
}

static node *insert(node *t, node *n)
{
    if (t == NULL)
        return n;
    if (cmp(n->item.start, n->item.index, t) < 0)
        t->left = insert(t->left, n);
    else
        t->right = insert(t->right, n);
    return balance(t);
}

static node *take_min(node *t, node **min)
{
    if (t->left == NULL) {
        *min = t;
        return t->right;
    }
    t->left = take_min(t->left, min);
    return balance(t);
}

static node *remove_at(node *t, uint64_t start, uint64_t index, node **gone)
{
    if (t == NULL)
        return NULL;
    int c = cmp(start, index, t);
    if (c < 0) {
        t->left = remove_at(t->left, start, index, gone);
    } else if (c > 0) {
        t->right = remove_at(t->right, start, index, gone);
    } else {
        *gone = t;
        if (t->left == NULL)
            return t->right;
        if (t->right == NULL)
            return t->left;
        node *m;
        node *right = take_min(t->right, &m);
        m->left = t->left;
        m->right = right;
        return balance(m);
    }
    return balance(t);
}

bool mh_range_insert(mh_range_tree *t, const mh_range_item *item)
{
    node *n = node_new();
    if (n == NULL)
        return false;
    n->item = *item;
    n->left = n->right = NULL;
    fix(n);
    t->root = insert(t->root, n);
    t->count++;
    return true;
}

bool mh_range_remove(mh_range_tree *t, uint64_t start, uint64_t index)
{
    node *gone = NULL;
    t->root = remove_at(t->root, start, index, &gone);
    if (gone == NULL)
        return false;
    node_free(gone);
    t->count--;
    return true;
}

/* A query: items overlapping [lo, hi), starting in [sa, sb), with an
 * index of at least min_index. */
typedef struct query {
    uint64_t lo, hi, sa, sb, min_index;
    const mh_range_item *best;
} query;

/* The earliest item of n's subtree the query takes into q->best, if it is
 * earlier than q->best: subtrees that end too soon, start too late or too
 * early, or hold nothing earlier are not visited, the one with the earlier
 * minimum first. */
static void first(const node *n, query *q)
{
    if (n == NULL || n->max_end <= q->lo || n->min_start >= q->sb || n->min_start >= q->hi ||
        (q->best != NULL && n->min_index >= q->best->index))
        return;
    const mh_range_item *it = &n->item;
    if (it->start >= q->sa && it->start < q->sb && it->start < q->hi && it->end > q->lo &&
        it->index >= q->min_index && (q->best == NULL || it->index < q->best->index))
        q->best = it;
    /* Left of n start at or before it, right of n at or after it. */
    const node *a = it->start >= q->sa ? n->left : NULL;
    const node *b = it->start < q->sb && it->start < q->hi ? n->right : NULL;
    if (b != NULL && a != NULL && b->min_index < a->min_index) {
        const node *s = a;
        a = b;
        b = s;
    }
    first(a, q);
    first(b, q);
}

bool mh_range_first(const mh_range_tree *t, uint64_t lo, uint64_t hi, uint64_t sa, uint64_t sb,
                    uint64_t min_index, mh_range_item *out)
{
    query q = {lo, hi, sa, sb, min_index, NULL};
    first(t->root, &q);
    if (q.best == NULL)
        return false;
    *out = *q.best;
    return true;
}

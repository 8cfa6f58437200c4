/* The fixtures' expected values: the table is generated from the .json
 * manifests by tests/c_tests.rs (fixtures_table.c, in a temporary directory). */
#ifndef TF_TEST_FIXTURES_H
#define TF_TEST_FIXTURES_H

#include <stddef.h>
#include <stdint.h>

#include "tensorfile.h"

struct fx_tensor {
    const char *name; /* may hold NUL characters: name_len is the length */
    size_t name_len;
    int dtype;
    int ndim;
    const int64_t *shape;
    size_t nbytes;
    const char *sha256; /* of the tensor's bytes, lowercase hex */
};

struct fx_file {
    const char *path; /* NULL ends FX_VALID */
    const char *stem;
    const struct fx_tensor *tensors; /* file (data) order */
    int ntensors;
    const char *const *meta; /* key, value, key, value, ... NULL; keys ascending */
    const size_t *meta_len;  /* the byte lengths of meta's strings (NULs inside count) */
    int nmeta;               /* -1: metadata not checked */
};

struct fx_reject {
    const char *path; /* NULL ends the table */
    int code;         /* 0: TL_EFORMAT or TL_EUNSUPPORTED */
};

/* A hostile checkpoint of issue 12, made at test time. */
struct fx_hostile {
    const char *path;  /* NULL ends the table */
    int load_code;     /* 0: fs_load_pytorch succeeds */
    int access_code;   /* when it loads, 0: every tensor reads; else each first access fails so */
    const char *part;  /* in the failure's message */
    int ntensors;      /* when it loads */
    int content;       /* 0: unchecked, 1: all zeros, 2: rows of the bytes 0..255, -1: not read */
};

/* Every file of tests/fixtures/valid/. */
extern const struct fx_file FX_VALID[];
/* Every file of tests/fixtures/invalid/, then NULL. */
extern const char *const FX_INVALID[];
/* The PyTorch checkpoints to load ("ok"), tensors in name order. */
extern const struct fx_file FX_PYTORCH_OK[];
/* The PyTorch checkpoints to refuse. */
extern const struct fx_reject FX_PYTORCH_REJECT[];
/* The hostile checkpoints. */
extern const struct fx_hostile FX_HOSTILE[];

#endif

/* The C tests of libtensorfile, run by tests/c_tests.rs (and by
 * .ci/c-tests.sh under valgrind and AddressSanitizer).
 *
 * Usage: test_tensorfile TMPDIR
 * Prints each failed check, then "N passed, N failed"; exits 1 on failure. */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixtures.h"
#include "sha256.h"
#include "tensorfile.h"

static int passed, failed;

#define CHECK(cond, ...)                                                       \
    do {                                                                       \
        if (cond) {                                                            \
            passed++;                                                          \
        } else {                                                               \
            failed++;                                                          \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);    \
            fprintf(stderr, __VA_ARGS__);                                      \
            fputc('\n', stderr);                                               \
        }                                                                      \
    } while (0)

static const char *tmpdir;

/* The last error is `code` and its message contains `part`. */
#define CHECK_ERROR(code, part, what)                                          \
    do {                                                                       \
        int got_ = fs_last_error();                                            \
        const char *msg_ = fs_last_error_message();                            \
        CHECK(got_ == (code), "%s: error %d, expected %d (%s)", what, got_,    \
              (code), msg_);                                                   \
        CHECK(msg_ != NULL && strstr(msg_, part) != NULL,                      \
              "%s: message \"%s\" lacks \"%s\"", what, msg_ ? msg_ : "(null)", \
              part);                                                           \
    } while (0)

static char *tmp_path(const char *name) {
    size_t n = strlen(tmpdir) + strlen(name) + 2;
    char *p = malloc(n);
    snprintf(p, n, "%s/%s", tmpdir, name);
    return p;
}

/* Reads a whole file; NULL if it cannot. */
static unsigned char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc(n > 0 ? (size_t)n : 1);
    *len = fread(buf, 1, (size_t)n, f);
    fclose(f);
    return buf;
}

static void write_all(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "cannot create %s\n", path);
        exit(2);
    }
    fwrite(data, 1, len, f);
    fclose(f);
}

/* ---- the hash used for expected values ---- */

static void test_sha256(void) {
    char hex[65];
    sha256_hex("abc", 3, hex);
    CHECK(strcmp(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad") == 0,
          "sha256(abc) = %s", hex);
    sha256_hex("", 0, hex);
    CHECK(strcmp(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855") == 0,
          "sha256('') = %s", hex);
    const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    sha256_hex(two, strlen(two), hex);
    CHECK(strcmp(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1") == 0,
          "sha256(two blocks) = %s", hex);
}

/* ---- reading the valid fixtures ---- */

/* Checks every tensor and the metadata of `f` against `fx`. */
static void check_file(fs_file *f, const struct fx_file *fx, int aligned64, const char *how) {
    CHECK(fs_num_tensors(f) == fx->ntensors, "%s %s: %d tensors, expected %d", how, fx->stem,
          fs_num_tensors(f), fx->ntensors);
    const char *const *names = fs_tensor_name_list(f);
    CHECK(names != NULL, "%s %s: no names", how, fx->stem);
    /* The original API gives the same read-only array, typed without const. */
    CHECK(fs_tensor_names(f) == names, "%s %s: fs_tensor_names is another array", how, fx->stem);
    if (!names) return;
    for (int i = 0; i < fx->ntensors; i++) {
        const struct fx_tensor *e = &fx->tensors[i];
        /* The array is in file order; a name with a NUL reads cut short. */
        CHECK(names[i] != NULL && strcmp(names[i], e->name) == 0, "%s %s: name %d", how,
              fx->stem, i);
        size_t len = 12345;
        const char *full = fs_tensor_name_at(f, i, &len);
        CHECK(full == names[i] && len == e->name_len && memcmp(full, e->name, len) == 0,
              "%s %s: fs_tensor_name_at(%d)", how, fx->stem, i);

        const tm_tensor *t = fs_tensor_at(f, i);
        CHECK(t != NULL, "%s %s: tensor %d: %s", how, fx->stem, i, fs_last_error_message());
        if (!t) continue;
        CHECK(fs_get_tensor_at(f, i) == t, "%s %s: fs_get_tensor_at(%d) is another tensor", how,
              fx->stem, i);
        if (strlen(e->name) == e->name_len) {
            CHECK(fs_tensor(f, e->name) == t, "%s %s: fs_tensor(%s) is not tensor %d", how,
                  fx->stem, e->name, i);
            CHECK(fs_get_tensor(f, e->name) == t, "%s %s: fs_get_tensor(%s) is not tensor %d",
                  how, fx->stem, e->name, i);
        }
        CHECK((int)t->dtype == e->dtype, "%s %s/%s: dtype %d, expected %d (%s)", how, fx->stem,
              e->name, (int)t->dtype, e->dtype, fs_dtype_name(e->dtype));
        CHECK(t->ndim == e->ndim, "%s %s/%s: ndim %d, expected %d", how, fx->stem, e->name,
              t->ndim, e->ndim);
        int same_shape = t->ndim == e->ndim && (t->ndim == 0 || t->shape != NULL);
        for (int d = 0; same_shape && d < e->ndim; d++) same_shape = t->shape[d] == e->shape[d];
        CHECK(same_shape, "%s %s/%s: shape differs", how, fx->stem, e->name);
        CHECK(t->nbytes == e->nbytes, "%s %s/%s: %zu bytes, expected %zu", how, fx->stem,
              e->name, t->nbytes, e->nbytes);
        CHECK(t->data != NULL, "%s %s/%s: data is NULL", how, fx->stem, e->name);
        if (t->data && t->nbytes == e->nbytes) {
            char hex[65];
            sha256_hex(t->data, t->nbytes, hex);
            CHECK(strcmp(hex, e->sha256) == 0, "%s %s/%s: sha256 %s, expected %s", how,
                  fx->stem, e->name, hex, e->sha256);
        }
        if (aligned64) {
            CHECK((uintptr_t)t->data % 64 == 0, "%s %s/%s: data %p not 64-byte aligned", how,
                  fx->stem, e->name, t->data);
        }
    }
    CHECK(names[fx->ntensors] == NULL, "%s %s: names not NULL-terminated", how, fx->stem);

    if (fx->nmeta < 0) return;
    const char *const *keys = fs_metadata_key_list(f);
    CHECK(keys != NULL, "%s %s: no key array", how, fx->stem);
    if (!keys) return;
    CHECK(fs_metadata_keys(f) == keys, "%s %s: fs_metadata_keys is another array", how, fx->stem);
    CHECK(fs_num_metadata(f) == fx->nmeta, "%s %s: %d metadata entries, expected %d", how,
          fx->stem, fs_num_metadata(f), fx->nmeta);
    for (int k = 0; k < fx->nmeta; k++) {
        const char *key = fx->meta[2 * k], *value = fx->meta[2 * k + 1];
        size_t key_len = fx->meta_len[2 * k], value_len = fx->meta_len[2 * k + 1];
        CHECK(keys[k] != NULL && strcmp(keys[k], key) == 0, "%s %s: key %d is %s, expected %s",
              how, fx->stem, k, keys[k] ? keys[k] : "NULL", key);
        const char *got = fs_get_metadata(f, key);
        CHECK(got != NULL && strcmp(got, value) == 0, "%s %s: metadata %s", how, fx->stem, key);
        /* By index, whole: the same strings, with their lengths. */
        size_t len = 12345;
        const char *full_key = fs_metadata_key_at(f, k, &len);
        CHECK(full_key == keys[k] && len == key_len && memcmp(full_key, key, len) == 0,
              "%s %s: fs_metadata_key_at(%d)", how, fx->stem, k);
        len = 12345;
        const char *full_value = fs_metadata_value_at(f, k, &len);
        CHECK(full_value != NULL && len == value_len && memcmp(full_value, value, len) == 0 &&
                  full_value[len] == '\0',
              "%s %s: fs_metadata_value_at(%d)", how, fx->stem, k);
        if (strlen(key) == key_len)
            CHECK(full_value == got, "%s %s: fs_metadata_value_at(%d) is not fs_get_metadata",
                  how, fx->stem, k);
    }
    CHECK(keys[fx->nmeta] == NULL, "%s %s: keys not NULL-terminated", how, fx->stem);
    CHECK(fs_metadata_key_at(f, fx->nmeta, NULL) == NULL, "%s %s: a key past the end", how,
          fx->stem);
}

/* Metadata whose key and value hold NUL characters: the C strings of
 * fs_metadata_keys and fs_get_metadata stop at the NUL, the indexed
 * accessors give every byte. */
static void test_metadata_with_nul(void) {
    static const char header[] = "{\"__metadata__\":{\"a\\u0000b\":\"x\\u0000yz\",\"c\":\"\"},"
                                 "\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}";
    unsigned char bytes[8 + 256];
    size_t n = strlen(header), padded = (n + 7) / 8 * 8;
    memset(bytes, ' ', sizeof bytes);
    for (int i = 0; i < 8; i++) bytes[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    memcpy(bytes + 8, header, n);
    bytes[8 + padded] = 42;
    char *path = tmp_path("nul_metadata.safetensors");
    write_all(path, bytes, 8 + padded + 1);
    for (int mapped = 0; mapped < 2; mapped++) {
        fs_file *f = mapped ? fs_mmap(path) : fs_open(path);
        CHECK(f != NULL, "nul metadata: open: %s", fs_last_error_message());
        if (!f) continue;
        CHECK(fs_num_metadata(f) == 2, "nul metadata: %d entries", fs_num_metadata(f));
        const char *const *keys = fs_metadata_key_list(f);
        CHECK(keys && strcmp(keys[0], "a") == 0 && strcmp(keys[1], "c") == 0 && !keys[2],
              "nul metadata: the key array");
        size_t len = 0;
        const char *key = fs_metadata_key_at(f, 0, &len);
        CHECK(key == keys[0] && len == 3 && memcmp(key, "a\0b", 3) == 0,
              "nul metadata: key 0 has %zu bytes", len);
        const char *value = fs_metadata_value_at(f, 0, &len);
        CHECK(value && len == 4 && memcmp(value, "x\0yz", 5) == 0,
              "nul metadata: value 0 has %zu bytes", len);
        value = fs_metadata_value_at(f, 1, &len);
        CHECK(value && len == 0 && value[0] == '\0', "nul metadata: value 1 has %zu bytes", len);
        CHECK(fs_metadata_value_at(f, 1, NULL) == value, "nul metadata: len may be NULL");
        /* The cut key is another key, which the file does not have. */
        CHECK(fs_get_metadata(f, "a") == NULL, "nul metadata: \"a\" found");
        CHECK_ERROR(TL_ENOTFOUND, "a", "fs_get_metadata(f, \"a\")");
        CHECK(fs_metadata_key_at(f, 2, NULL) == NULL, "nul metadata: key 2");
        CHECK_ERROR(TL_ENOTFOUND, "out of range", "fs_metadata_key_at(f, 2)");
        CHECK(fs_metadata_value_at(f, -1, NULL) == NULL, "nul metadata: value -1");
        CHECK_ERROR(TL_EINVAL, "negative", "fs_metadata_value_at(f, -1)");
        fs_close(f);
    }
    CHECK(fs_num_metadata(NULL) == TL_EINVAL, "fs_num_metadata(NULL)");
    CHECK(fs_metadata_key_at(NULL, 0, NULL) == NULL, "fs_metadata_key_at(NULL)");
    CHECK_ERROR(TL_EINVAL, "NULL", "fs_metadata_key_at(NULL)");
    CHECK(fs_metadata_value_at(NULL, 0, NULL) == NULL, "fs_metadata_value_at(NULL)");
    free(path);
}

static void test_valid_files(void) {
    int files = 0;
    for (const struct fx_file *fx = FX_VALID; fx->path; fx++, files++) {
        fs_file *f = fs_open(fx->path);
        CHECK(f != NULL, "fs_open %s: %s", fx->stem, fs_last_error_message());
        if (f) check_file(f, fx, 1, "fs_open");
        CHECK(fs_close(f) == 0, "fs_close");

        f = fs_mmap(fx->path);
        CHECK(f != NULL, "fs_mmap %s: %s", fx->stem, fs_last_error_message());
        if (f) check_file(f, fx, 0, "fs_mmap");
        fs_close(f);
    }
    CHECK(files >= 10, "only %d valid fixtures", files);
}

static void test_invalid_files(void) {
    int files = 0;
    for (const char *const *path = FX_INVALID; *path; path++, files++) {
        fs_file *f = fs_open(*path);
        CHECK(f == NULL, "fs_open accepted %s", *path);
        CHECK_ERROR(TL_EFORMAT, "rule ", *path);
        fs_close(f);
        f = fs_mmap(*path);
        CHECK(f == NULL, "fs_mmap accepted %s", *path);
        CHECK_ERROR(TL_EFORMAT, "rule ", *path);
        fs_close(f);
    }
    CHECK(files >= 20, "only %d invalid fixtures", files);
}

/* ---- PyTorch checkpoints ---- */

static void test_pytorch(void) {
    int files = 0;
    for (const struct fx_file *fx = FX_PYTORCH_OK; fx->path; fx++, files++) {
        fs_file *f = fs_load_pytorch(fx->path);
        CHECK(f != NULL, "fs_load_pytorch %s: %s", fx->stem, fs_last_error_message());
        if (f) check_file(f, fx, 0, "fs_load_pytorch");
        fs_close(f);
        /* The mapped way gives the same tensors. */
        f = fs_mmap_pytorch(fx->path);
        CHECK(f != NULL, "fs_mmap_pytorch %s: %s", fx->stem, fs_last_error_message());
        if (f) check_file(f, fx, 0, "fs_mmap_pytorch");
        fs_close(f);
    }
    CHECK(files >= 20, "only %d loadable checkpoints", files);
    files = 0;
    for (const struct fx_reject *r = FX_PYTORCH_REJECT; r->path; r++, files++) {
        fs_file *f = fs_load_pytorch(r->path);
        CHECK(f == NULL, "fs_load_pytorch accepted %s", r->path);
        int code = fs_last_error();
        if (r->code) {
            CHECK(code == r->code, "%s: error %d, expected %d (%s)", r->path, code, r->code,
                  fs_last_error_message());
        } else {
            CHECK(code == TL_EFORMAT || code == TL_EUNSUPPORTED, "%s: error %d (%s)", r->path,
                  code, fs_last_error_message());
        }
        CHECK(strlen(fs_last_error_message()) > 10, "%s: message \"%s\"", r->path,
              fs_last_error_message());
        fs_close(f);
    }
    CHECK(files >= 20, "only %d refused checkpoints", files);

    /* A pickle global off the allow-list is named in the message. */
    for (const struct fx_reject *r = FX_PYTORCH_REJECT; r->path; r++) {
        if (!strstr(r->path, "evil_posix_system.pt")) continue;
        CHECK(fs_load_pytorch(r->path) == NULL, "evil_posix_system loaded");
        CHECK_ERROR(TL_EUNSUPPORTED, "posix.system is not allowed", "evil_posix_system");
    }
    CHECK(fs_load_pytorch(NULL) == NULL, "fs_load_pytorch(NULL)");
    CHECK_ERROR(TL_EINVAL, "NULL", "fs_load_pytorch(NULL)");
    CHECK(fs_mmap_pytorch(NULL) == NULL, "fs_mmap_pytorch(NULL)");
    CHECK_ERROR(TL_EINVAL, "NULL", "fs_mmap_pytorch(NULL)");
    /* A safetensors file is not a checkpoint. */
    CHECK(fs_load_pytorch(FX_VALID[0].path) == NULL, "a safetensors file loaded as PyTorch");
    CHECK_ERROR(TL_EUNSUPPORTED, "safetensors", "fs_load_pytorch(safetensors)");
}

/* A checkpoint truncated by another process after fs_load_pytorch: the
 * first access of a tensor with bytes fails with TL_EIO naming the file,
 * never SIGBUS (the file is read, not mapped). */
static void test_pytorch_truncated(void) {
    const struct fx_file *fx = NULL;
    for (const struct fx_file *p = FX_PYTORCH_OK; p->path && !fx; p++)
        for (int i = 0; i < p->ntensors; i++)
            if (p->tensors[i].nbytes > 0) fx = p;
    CHECK(fx != NULL, "no checkpoint with tensor bytes");
    if (!fx) return;
    size_t len = 0;
    unsigned char *bytes = read_all(fx->path, &len);
    char *path = tmp_path("truncated_underneath.pt");
    write_all(path, bytes, len);
    free(bytes);
    fs_file *f = fs_load_pytorch(path);
    CHECK(f != NULL, "fs_load_pytorch %s: %s", path, fs_last_error_message());
    if (f) {
        FILE *cut = fopen(path, "wb"); /* truncates it to 0 bytes */
        if (cut) fclose(cut);
        int refused = 0;
        for (int i = 0; i < fs_num_tensors(f); i++) {
            if (fx->tensors[i].nbytes == 0) continue;
            CHECK(fs_get_tensor_at(f, i) == NULL, "tensor %d read from a cut file", i);
            CHECK_ERROR(TL_EIO, "truncated_underneath.pt", "a tensor of the cut file");
            CHECK_ERROR(TL_EIO, "changed or truncated", "a tensor of the cut file");
            refused++;
        }
        CHECK(refused > 0, "no tensor refused");
    }
    fs_close(f);
    free(path);
}

/* ---- hostile PyTorch checkpoints (issue 12) ---- */

/* The bytes of a tensor are what `content` says. */
static int content_ok(const tm_tensor *t, int content) {
    const unsigned char *b = t->data;
    for (size_t i = 0; i < t->nbytes; i++) {
        if (content == 1 && b[i] != 0) return 0;
        if (content == 2 && b[i] != (unsigned char)(i % 256)) return 0;
    }
    return 1;
}

struct lazy_job {
    fs_file *f;
    int n;
    const tm_tensor *got[8];
};

/* Reads every tensor of a shared file, first accesses racing. */
static void *read_lazy(void *arg) {
    struct lazy_job *job = arg;
    for (int i = 0; i < job->n && i < 8; i++) job->got[i] = fs_tensor_at(job->f, i);
    return NULL;
}

static void test_pytorch_hostile(void) {
    int files = 0;
    for (const struct fx_hostile *h = FX_HOSTILE; h->path; h++, files++) {
        fs_file *f = fs_load_pytorch(h->path);
        if (h->load_code) {
            CHECK(f == NULL, "fs_load_pytorch accepted %s", h->path);
            CHECK_ERROR(h->load_code, h->part, h->path);
            continue;
        }
        CHECK(f != NULL, "fs_load_pytorch %s: %s", h->path, fs_last_error_message());
        if (!f) continue;
        CHECK(fs_num_tensors(f) == h->ntensors, "%s: %d tensors, expected %d", h->path,
              fs_num_tensors(f), h->ntensors);
        for (int i = 0; h->content >= 0 && i < h->ntensors; i++) {
            const tm_tensor *t = fs_tensor_at(f, i);
            if (h->access_code) {
                CHECK(t == NULL, "%s: tensor %d read", h->path, i);
                CHECK_ERROR(h->access_code, h->part, h->path);
                /* The failure is kept: the second access fails alike. */
                CHECK(fs_tensor_at(f, i) == NULL, "%s: tensor %d read again", h->path, i);
                CHECK_ERROR(h->access_code, h->part, h->path);
                continue;
            }
            CHECK(t != NULL, "%s: tensor %d: %s", h->path, i, fs_last_error_message());
            if (!t) continue;
            CHECK(fs_tensor_at(f, i) == t, "%s: tensor %d moved", h->path, i);
            CHECK(t->data != NULL && content_ok(t, h->content), "%s: tensor %d's bytes", h->path,
                  i);
        }
        fs_close(f);
    }
    CHECK(files >= 9, "only %d hostile checkpoints", files);

    /* Gathered on first access, once, when threads race for it. */
    for (const struct fx_hostile *h = FX_HOSTILE; h->path; h++) {
        if (!strstr(h->path, "expansions_small.pt")) continue;
        fs_file *f = fs_load_pytorch(h->path);
        CHECK(f != NULL, "%s: %s", h->path, fs_last_error_message());
        if (!f) continue;
        enum { N = 4 };
        pthread_t threads[N];
        struct lazy_job jobs[N];
        for (int k = 0; k < N; k++) {
            jobs[k] = (struct lazy_job){f, h->ntensors, {0}};
            pthread_create(&threads[k], NULL, read_lazy, &jobs[k]);
        }
        for (int k = 0; k < N; k++) pthread_join(threads[k], NULL);
        for (int i = 0; i < h->ntensors; i++) {
            const tm_tensor *t = jobs[0].got[i];
            CHECK(t != NULL && content_ok(t, 2) && t->nbytes == 256000,
                  "expansion %d read by thread 0", i);
            for (int k = 1; k < N; k++)
                CHECK(jobs[k].got[i] == t, "thread %d got another tensor %d", k, i);
            CHECK(fs_tensor_at(f, i) == t, "tensor %d moved", i);
        }
        fs_close(f);
    }
}

/* ---- writing ---- */

/* The format page's worked example: 120 bytes. */
static void test_worked_example(void) {
    static const unsigned char expected_prefix[8] = {0x60, 0, 0, 0, 0, 0, 0, 0};
    static const char header[] =
        "{\"__metadata__\":{\"format\":\"tinyllm\"},\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],"
        "\"data_offsets\":[0,16]}}   ";
    static const unsigned char data[16] = {0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0x40,
                                           0x00, 0x00, 0x40, 0x40, 0x00, 0x00, 0x80, 0x40};
    unsigned char expected[120];
    memcpy(expected, expected_prefix, 8);
    memcpy(expected + 8, header, 96);
    memcpy(expected + 104, data, 16);

    char *path = tmp_path("worked_example.safetensors");
    float values[4] = {1, 2, 3, 4};
    int64_t shape[2] = {2, 2};
    tm_tensor w = {TL_F32, 2, shape, values, sizeof values};
    fs_writer *wr = fs_writer_new(path);
    CHECK(wr != NULL, "fs_writer_new: %s", fs_last_error_message());
    CHECK(fs_set_metadata(wr, "format", "tinyllm") == 0, "fs_set_metadata");
    CHECK(fs_add_tensor(wr, "w", &w) == 0, "fs_add_tensor: %s", fs_last_error_message());
    /* The shape is copied at fs_add_tensor: changing it now changes nothing. */
    shape[0] = 99;
    CHECK(fs_write(wr) == 0, "fs_write: %s", fs_last_error_message());

    size_t len = 0;
    unsigned char *got = read_all(path, &len);
    CHECK(got && len == 120 && memcmp(got, expected, 120) == 0, "worked example: %zu bytes", len);
    free(got);
    free(path);
}

/* Every valid fixture, read through fs_mmap and written back through the
 * writer, gives the same bytes (the fixtures are canonical). */
static void test_rewrite_fixtures(void) {
    for (const struct fx_file *fx = FX_VALID; fx->path; fx++) {
        int has_nul_name = 0;
        for (int i = 0; i < fx->ntensors; i++)
            has_nul_name |= strlen(fx->tensors[i].name) != fx->tensors[i].name_len;
        if (has_nul_name) continue; /* not writable through a C string */

        fs_file *f = fs_mmap(fx->path);
        if (!f) continue; /* reported by test_valid_files */
        char *out = tmp_path("rewrite.safetensors");
        fs_writer *w = fs_writer_new(out);
        int n = fs_num_tensors(f);
        const char *const *names = fs_tensor_name_list(f);
        for (int i = 0; i < n; i++) {
            CHECK(fs_add_tensor(w, names[i], fs_tensor_at(f, i)) == 0, "%s: add %s: %s",
                  fx->stem, names[i], fs_last_error_message());
        }
        for (const char *const *k = fs_metadata_key_list(f); *k; k++)
            CHECK(fs_set_metadata(w, *k, fs_get_metadata(f, *k)) == 0, "%s: metadata", fx->stem);
        CHECK(fs_write(w) == 0, "%s: fs_write: %s", fx->stem, fs_last_error_message());
        fs_close(f);

        size_t a = 0, b = 0;
        unsigned char *orig = read_all(fx->path, &a), *copy = read_all(out, &b);
        CHECK(orig && copy && a == b && memcmp(orig, copy, a) == 0,
              "%s: rewritten file differs (%zu vs %zu bytes)", fx->stem, b, a);
        free(orig);
        free(copy);
        free(out);
    }
}

/* ---- error paths ---- */

static void test_reader_errors(void) {
    CHECK(fs_open(NULL) == NULL, "fs_open(NULL)");
    CHECK_ERROR(TL_EINVAL, "NULL", "fs_open(NULL)");
    CHECK(fs_mmap(NULL) == NULL, "fs_mmap(NULL)");
    CHECK_ERROR(TL_EINVAL, "NULL", "fs_mmap(NULL)");
    CHECK(fs_open("") == NULL, "fs_open('')");
    CHECK_ERROR(TL_EINVAL, "empty", "fs_open('')");

    char *missing = tmp_path("no-such-file.safetensors");
    CHECK(fs_open(missing) == NULL, "fs_open(missing)");
    CHECK_ERROR(TL_EIO, "no-such-file.safetensors", "fs_open(missing)");
    CHECK(fs_mmap(missing) == NULL, "fs_mmap(missing)");
    CHECK_ERROR(TL_EIO, "no-such-file.safetensors", "fs_mmap(missing)");
    free(missing);

    CHECK(fs_num_tensors(NULL) == TL_EINVAL, "fs_num_tensors(NULL)");
    CHECK_ERROR(TL_EINVAL, "NULL", "fs_num_tensors(NULL)");
    CHECK(fs_tensor_names(NULL) == NULL, "fs_tensor_names(NULL)");
    CHECK(fs_get_tensor(NULL, "w") == NULL, "fs_get_tensor(NULL)");
    CHECK_ERROR(TL_EINVAL, "NULL", "fs_get_tensor(NULL, w)");
    CHECK(fs_get_tensor_at(NULL, 0) == NULL, "fs_get_tensor_at(NULL)");
    CHECK(fs_tensor_name_at(NULL, 0, NULL) == NULL, "fs_tensor_name_at(NULL)");
    CHECK(fs_metadata_keys(NULL) == NULL, "fs_metadata_keys(NULL)");
    CHECK(fs_tensor_name_list(NULL) == NULL, "fs_tensor_name_list(NULL)");
    CHECK_ERROR(TL_EINVAL, "NULL", "fs_tensor_name_list(NULL)");
    CHECK(fs_metadata_key_list(NULL) == NULL, "fs_metadata_key_list(NULL)");
    CHECK_ERROR(TL_EINVAL, "NULL", "fs_metadata_key_list(NULL)");
    CHECK(fs_tensor(NULL, "w") == NULL, "fs_tensor(NULL)");
    CHECK_ERROR(TL_EINVAL, "NULL", "fs_tensor(NULL, w)");
    CHECK(fs_tensor_at(NULL, 0) == NULL, "fs_tensor_at(NULL)");
    CHECK_ERROR(TL_EINVAL, "NULL", "fs_tensor_at(NULL, 0)");
    CHECK(fs_get_metadata(NULL, "format") == NULL, "fs_get_metadata(NULL)");
    CHECK(fs_close(NULL) == 0, "fs_close(NULL)");

    fs_file *f = fs_open(FX_VALID[0].path);
    for (const struct fx_file *fx = FX_VALID; fx->path; fx++)
        if (strcmp(fx->stem, "worked_example") == 0) {
            fs_close(f);
            f = fs_open(fx->path);
        }
    CHECK(f != NULL && fs_get_tensor(f, "w") != NULL, "worked_example has w");
    CHECK(fs_tensor(f, NULL) == NULL, "fs_tensor(f, NULL)");
    CHECK_ERROR(TL_EINVAL, "NULL", "fs_tensor(f, NULL)");
    CHECK(fs_tensor(f, "\xff\xfe") == NULL, "fs_tensor(f, bad UTF-8)");
    CHECK_ERROR(TL_EINVAL, "UTF-8", "fs_tensor(f, bad UTF-8)");
    CHECK(fs_tensor(f, "nope") == NULL, "fs_tensor(f, nope)");
    CHECK_ERROR(TL_ENOTFOUND, "nope", "fs_tensor(f, nope)");
    /* A success clears the error. */
    CHECK(fs_get_tensor(f, "w") != NULL, "fs_get_tensor(f, w)");
    CHECK(fs_last_error() == TL_OK && strcmp(fs_last_error_message(), "") == 0,
          "a success leaves error %d", fs_last_error());
    CHECK(fs_tensor_at(f, -1) == NULL, "fs_tensor_at(f, -1)");
    CHECK_ERROR(TL_EINVAL, "negative", "fs_tensor_at(f, -1)");
    CHECK(fs_tensor_at(f, 1) == NULL, "fs_tensor_at(f, 1)");
    CHECK_ERROR(TL_ENOTFOUND, "out of range", "fs_tensor_at(f, 1)");
    CHECK(fs_tensor_name_at(f, 1, NULL) == NULL, "fs_tensor_name_at(f, 1)");
    CHECK_ERROR(TL_ENOTFOUND, "out of range", "fs_tensor_name_at(f, 1)");
    CHECK(fs_get_metadata(f, "nokey") == NULL, "fs_get_metadata(f, nokey)");
    CHECK_ERROR(TL_ENOTFOUND, "nokey", "fs_get_metadata(f, nokey)");
    CHECK(fs_get_metadata(f, NULL) == NULL, "fs_get_metadata(f, NULL)");
    CHECK_ERROR(TL_EINVAL, "NULL", "fs_get_metadata(f, NULL)");
    CHECK(fs_get_metadata(f, "\xc3") == NULL, "fs_get_metadata(f, bad UTF-8)");
    CHECK_ERROR(TL_EINVAL, "UTF-8", "fs_get_metadata(f, bad UTF-8)");
    fs_close(f);

    /* A valid file whose dimension does not fit int64_t: refused, not wrapped. */
    static const char huge[] = "{\"x\":{\"dtype\":\"F32\",\"shape\":[0,9223372036854775808],"
                               "\"data_offsets\":[0,0]}}";
    unsigned char bytes[8 + 128];
    size_t n = strlen(huge), padded = (n + 7) / 8 * 8;
    memset(bytes, ' ', sizeof bytes);
    for (int i = 0; i < 8; i++) bytes[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    memcpy(bytes + 8, huge, n);
    char *path = tmp_path("huge_dim.safetensors");
    write_all(path, bytes, 8 + padded);
    CHECK(fs_open(path) == NULL, "fs_open(huge dim)");
    CHECK_ERROR(TL_EUNSUPPORTED, "int64_t", "fs_open(huge dim)");
    CHECK(fs_mmap(path) == NULL, "fs_mmap(huge dim)");
    CHECK_ERROR(TL_EUNSUPPORTED, "int64_t", "fs_mmap(huge dim)");
    free(path);
}

/* The codes keep their numbers (an ABI), and each kind of error the
 * library has gets its own: an output path that is a directory is an I/O
 * error, a header over the format's cap is refused as over a limit. */
static void test_error_codes(void) {
    CHECK(TL_OK == 0 && TL_EFORMAT == -1 && TL_EIO == -2 && TL_ENOMEM == -3 &&
              TL_EINVAL == -4 && TL_ENOTFOUND == -5 && TL_EUNSUPPORTED == -6 &&
              TL_EINTERNAL == -7,
          "the TL_E* numbers moved");

    float v[1] = {1};
    int64_t shape[1] = {1};
    tm_tensor t = {TL_F32, 1, shape, v, sizeof v};
    fs_writer *w = fs_writer_new(tmpdir);
    CHECK(fs_add_tensor(w, "a", &t) == 0, "add a: %s", fs_last_error_message());
    CHECK(fs_write(w) == TL_EIO, "fs_write onto a directory");
    CHECK_ERROR(TL_EIO, "is a directory", "fs_write onto a directory");

    /* 100,000,000 bytes of metadata: the header is over the format's cap. */
    size_t big = 100000000;
    char *value = malloc(big + 1);
    memset(value, 'x', big);
    value[big] = '\0';
    char *path = tmp_path("too_large.safetensors");
    w = fs_writer_new(path);
    CHECK(fs_set_metadata(w, "k", value) == 0, "set a large value: %s", fs_last_error_message());
    free(value);
    CHECK(fs_write(w) == TL_EUNSUPPORTED, "fs_write of a header over the cap");
    CHECK_ERROR(TL_EUNSUPPORTED, "over the limit of 100000000", "fs_write of a header over the cap");
    size_t len;
    unsigned char *nothing = read_all(path, &len);
    CHECK(nothing == NULL, "a refused header left a file");
    free(nothing);
    free(path);
}

static void test_writer_errors(void) {
    CHECK(fs_writer_new(NULL) == NULL, "fs_writer_new(NULL)");
    CHECK_ERROR(TL_EINVAL, "NULL", "fs_writer_new(NULL)");
    CHECK(fs_writer_free(NULL) == 0, "fs_writer_free(NULL)");
    CHECK(fs_write(NULL) == TL_EINVAL, "fs_write(NULL)");
    CHECK_ERROR(TL_EINVAL, "NULL", "fs_write(NULL)");

    char *path = tmp_path("errors.safetensors");
    fs_writer *w = fs_writer_new(path);
    float v[6] = {0};
    int64_t shape[2] = {2, 3};
    tm_tensor t = {TL_F32, 2, shape, v, sizeof v};

    CHECK(fs_add_tensor(NULL, "a", &t) == TL_EINVAL, "fs_add_tensor(NULL, ...)");
    CHECK(fs_add_tensor(w, NULL, &t) == TL_EINVAL, "fs_add_tensor(w, NULL, t)");
    CHECK_ERROR(TL_EINVAL, "NULL", "fs_add_tensor(w, NULL, t)");
    CHECK(fs_add_tensor(w, "a", NULL) == TL_EINVAL, "fs_add_tensor(w, a, NULL)");
    CHECK_ERROR(TL_EINVAL, "NULL", "fs_add_tensor(w, a, NULL)");
    CHECK(fs_add_tensor(w, "bad\xff", &t) == TL_EINVAL, "non-UTF-8 name");
    CHECK_ERROR(TL_EINVAL, "UTF-8", "non-UTF-8 name");
    CHECK(fs_add_tensor(w, "__metadata__", &t) == TL_EINVAL, "reserved name");
    CHECK_ERROR(TL_EINVAL, "__metadata__", "reserved name");

    tm_tensor bad = t;
    bad.nbytes = 20;
    CHECK(fs_add_tensor(w, "short", &bad) == TL_EINVAL, "wrong nbytes");
    CHECK_ERROR(TL_EINVAL, "nbytes is 20, but shape [2, 3] x F32 needs 24", "wrong nbytes");
    bad = t;
    bad.dtype = (tl_dtype)22;
    CHECK(fs_add_tensor(w, "dtype", &bad) == TL_EINVAL, "dtype 22");
    CHECK_ERROR(TL_EINVAL, "not a tl_dtype", "dtype 22");
    bad = t;
    bad.ndim = -1;
    CHECK(fs_add_tensor(w, "ndim", &bad) == TL_EINVAL, "ndim -1");
    CHECK_ERROR(TL_EINVAL, "ndim", "ndim -1");
    int64_t negative[2] = {2, -3};
    bad = t;
    bad.shape = negative;
    CHECK(fs_add_tensor(w, "neg", &bad) == TL_EINVAL, "negative dimension");
    CHECK_ERROR(TL_EINVAL, "negative dimension", "negative dimension");
    bad = t;
    bad.shape = NULL;
    CHECK(fs_add_tensor(w, "noshape", &bad) == TL_EINVAL, "NULL shape");
    CHECK_ERROR(TL_EINVAL, "shape is NULL", "NULL shape");
    bad = t;
    bad.data = NULL;
    CHECK(fs_add_tensor(w, "nodata", &bad) == TL_EINVAL, "NULL data");
    CHECK_ERROR(TL_EINVAL, "data is NULL", "NULL data");
    int64_t three = 3;
    unsigned char nibbles[2] = {0};
    tm_tensor f4 = {TL_F4, 1, &three, nibbles, 1};
    CHECK(fs_add_tensor(w, "f4", &f4) == TL_EINVAL, "3 x F4");
    CHECK_ERROR(TL_EINVAL, "whole number of bytes", "3 x F4");
    int64_t big[2] = {INT64_MAX, 4};
    bad = t;
    bad.shape = big;
    CHECK(fs_add_tensor(w, "overflow", &bad) == TL_EINVAL, "overflowing shape");
    CHECK_ERROR(TL_EINVAL, "overflows", "overflowing shape");

    CHECK(fs_add_tensor(w, "a", &t) == 0, "add a: %s", fs_last_error_message());
    CHECK(fs_add_tensor(w, "a", &t) == TL_EINVAL, "add a twice");
    CHECK_ERROR(TL_EINVAL, "already added", "add a twice");
    /* A scalar: ndim 0 with a NULL shape; an empty tensor: NULL data. */
    float one = 1;
    tm_tensor scalar = {TL_F32, 0, NULL, &one, 4};
    CHECK(fs_add_tensor(w, "scalar", &scalar) == 0, "scalar: %s", fs_last_error_message());
    int64_t zero = 0;
    tm_tensor empty = {TL_I64, 1, &zero, NULL, 0};
    CHECK(fs_add_tensor(w, "empty", &empty) == 0, "empty: %s", fs_last_error_message());

    CHECK(fs_set_metadata(NULL, "k", "v") == TL_EINVAL, "fs_set_metadata(NULL)");
    CHECK(fs_set_metadata(w, NULL, "v") == TL_EINVAL, "fs_set_metadata(w, NULL, v)");
    CHECK(fs_set_metadata(w, "k", NULL) == TL_EINVAL, "fs_set_metadata(w, k, NULL)");
    CHECK_ERROR(TL_EINVAL, "metadata value is NULL", "fs_set_metadata(w, k, NULL)");
    CHECK(fs_set_metadata(w, "k", "\xe2\x82") == TL_EINVAL, "non-UTF-8 value");
    CHECK_ERROR(TL_EINVAL, "UTF-8", "non-UTF-8 value");
    CHECK(fs_set_metadata(w, "k", "first") == 0, "set k");
    CHECK(fs_set_metadata(w, "k", "second") == 0, "set k again");
    CHECK(fs_write(w) == 0, "write: %s", fs_last_error_message());

    fs_file *f = fs_open(path);
    CHECK(f && fs_num_tensors(f) == 3, "3 tensors written");
    CHECK(f && fs_get_metadata(f, "k") && strcmp(fs_get_metadata(f, "k"), "second") == 0,
          "the last value wins");
    const tm_tensor *s = f ? fs_tensor(f, "scalar") : NULL;
    CHECK(s && s->ndim == 0 && s->nbytes == 4 && *(const float *)s->data == 1.0f, "scalar back");
    const tm_tensor *e = f ? fs_tensor(f, "empty") : NULL;
    CHECK(e && e->ndim == 1 && e->shape[0] == 0 && e->nbytes == 0 && e->data != NULL,
          "empty back");
    fs_close(f);

    /* Writing into a directory that does not exist fails, frees the writer
     * (valgrind checks), and leaves nothing behind. */
    char *nowhere = tmp_path("no-such-dir/x.safetensors");
    w = fs_writer_new(nowhere);
    CHECK(fs_add_tensor(w, "a", &t) == 0, "add a");
    CHECK(fs_write(w) == TL_EIO, "fs_write into a missing directory");
    CHECK_ERROR(TL_EIO, "no-such-dir", "fs_write into a missing directory");
    free(nowhere);

    /* A discarded writer writes nothing. */
    char *discarded = tmp_path("discarded.safetensors");
    w = fs_writer_new(discarded);
    CHECK(fs_add_tensor(w, "a", &t) == 0, "add a");
    CHECK(fs_writer_free(w) == 0, "fs_writer_free");
    size_t len;
    unsigned char *nothing = read_all(discarded, &len);
    CHECK(nothing == NULL, "fs_writer_free wrote a file");
    free(nothing);
    free(discarded);
    free(path);
}

static void test_helpers(void) {
    CHECK(strcmp(fs_version(), TF_EXPECTED_VERSION) == 0, "version %s", fs_version());
    CHECK(strcmp(fs_dtype_name(TL_BF16), "BF16") == 0, "BF16 name");
    CHECK(strcmp(fs_dtype_name(TL_F8_E4M3), "F8_E4M3") == 0, "F8_E4M3 name");
    CHECK(strcmp(fs_dtype_name(TL_BOOL), "BOOL") == 0 && strcmp(fs_dtype_name(TL_U64), "U64") == 0,
          "first and last names");
    CHECK(fs_dtype_name(22) == NULL, "dtype 22 has a name");
    CHECK_ERROR(TL_EINVAL, "22", "fs_dtype_name(22)");
    CHECK(fs_dtype_name(-1) == NULL, "dtype -1 has a name");
    CHECK(fs_dtype_bits(TL_F4) == 4 && fs_dtype_bits(TL_F6_E3M2) == 6 &&
              fs_dtype_bits(TL_BF16) == 16 && fs_dtype_bits(TL_C64) == 64 &&
              fs_dtype_bits(TL_BOOL) == 8,
          "bit sizes");
    CHECK(fs_dtype_bits(99) == TL_EINVAL, "bits of 99");
    for (int d = TL_BOOL; d <= TL_U64; d++)
        CHECK(fs_dtype_from_name(fs_dtype_name(d)) == d, "name of %d round-trips", d);
    CHECK(fs_dtype_from_name("f32") == TL_EINVAL, "lowercase dtype");
    CHECK_ERROR(TL_EINVAL, "f32", "fs_dtype_from_name(f32)");
    CHECK(fs_dtype_from_name(NULL) == TL_EINVAL, "fs_dtype_from_name(NULL)");
}

/* ---- threads ---- */

struct reader_job {
    fs_file *f;
    const struct fx_file *fx;
    int mismatches;
};

/* Looks up and hashes every tensor of a shared fs_file. */
static void *read_shared(void *arg) {
    struct reader_job *job = arg;
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < job->fx->ntensors; i++) {
            const struct fx_tensor *e = &job->fx->tensors[i];
            const tm_tensor *t = fs_tensor(job->f, e->name);
            char hex[65];
            if (!t) {
                job->mismatches++;
                continue;
            }
            sha256_hex(t->data, t->nbytes, hex);
            job->mismatches += strcmp(hex, e->sha256) != 0;
        }
        job->mismatches += fs_tensor(job->f, "missing") != NULL;
        job->mismatches += fs_last_error() != TL_ENOTFOUND;
    }
    return NULL;
}

static void test_threads(void) {
    const struct fx_file *fx = NULL;
    for (const struct fx_file *p = FX_VALID; p->path; p++)
        if (strcmp(p->stem, "llama_two_layers_bf16") == 0) fx = p;
    CHECK(fx != NULL, "llama_two_layers_bf16 fixture present");
    if (!fx) return;
    fs_file *files[2] = {fs_open(fx->path), fs_mmap(fx->path)};
    for (int k = 0; k < 2; k++) {
        enum { N = 4 };
        pthread_t threads[N];
        struct reader_job jobs[N];
        for (int i = 0; i < N; i++) {
            jobs[i] = (struct reader_job){files[k], fx, 0};
            pthread_create(&threads[i], NULL, read_shared, &jobs[i]);
        }
        /* Errors are per thread: the readers' TL_ENOTFOUND is not ours. */
        CHECK(fs_tensor(files[k], "") == NULL, "empty name");
        for (int i = 0; i < N; i++) {
            pthread_join(threads[i], NULL);
            CHECK(jobs[i].mismatches == 0, "thread %d: %d mismatches", i, jobs[i].mismatches);
        }
        CHECK_ERROR(TL_ENOTFOUND, "\"\"", "this thread's error");
        fs_close(files[k]);
    }
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s TMPDIR\n", argv[0]);
        return 2;
    }
    tmpdir = argv[1];
    test_sha256();
    test_valid_files();
    test_metadata_with_nul();
    test_invalid_files();
    test_pytorch();
    test_pytorch_truncated();
    test_pytorch_hostile();
    test_worked_example();
    test_rewrite_fixtures();
    test_reader_errors();
    test_writer_errors();
    test_error_codes();
    test_helpers();
    test_threads();
    printf("%d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}

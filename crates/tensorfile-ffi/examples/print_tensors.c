/* Prints a safetensors file's tensors: name, dtype, shape, size, alignment,
 * then its metadata.
 *
 *   cc print_tensors.c $(pkg-config --cflags --libs tensorfile) -o print_tensors
 *   ./print_tensors [--mmap] model.safetensors
 *   ./print_tensors --pytorch model.pth
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <tensorfile.h>

int main(int argc, char **argv) {
    const char *mode = argc == 3 ? argv[1] : "";
    if (!(argc == 2 || (argc == 3 && (!strcmp(mode, "--mmap") || !strcmp(mode, "--pytorch"))))) {
        fprintf(stderr, "usage: %s [--mmap | --pytorch] FILE\n", argv[0]);
        return 2;
    }
    const char *path = argv[argc - 1];
    /* fs_open copies the data into 64-byte aligned memory; fs_mmap maps the
     * file and keeps its own alignment; fs_load_pytorch reads torch.save files. */
    fs_file *f = !strcmp(mode, "--mmap")      ? fs_mmap(path)
                 : !strcmp(mode, "--pytorch") ? fs_load_pytorch(path)
                                              : fs_open(path);
    if (!f) {
        fprintf(stderr, "%s: %s (error %d)\n", path, fs_last_error_message(), fs_last_error());
        return 1;
    }
    int n = fs_num_tensors(f);
    printf("%s: %d tensors (libtensorfile %s)\n", path, n, fs_version());
    for (int i = 0; i < n; i++) {
        const char *name = fs_tensor_name_at(f, i, NULL);
        /* A PyTorch tensor that must be gathered is made here, on first
         * access, which can fail (a budget exceeded, a broken record). */
        const tm_tensor *t = fs_tensor_at(f, i);
        if (!t) {
            fprintf(stderr, "%s: tensor %s: %s (error %d)\n", path, name, fs_last_error_message(),
                    fs_last_error());
            fs_close(f);
            return 1;
        }
        printf("%s %s [", name, fs_dtype_name(t->dtype));
        for (int d = 0; d < t->ndim; d++) printf(d ? ", %lld" : "%lld", (long long)t->shape[d]);
        printf("] %zu bytes", t->nbytes);
        printf((uintptr_t)t->data % 64 == 0 ? ", 64-byte aligned\n" : "\n");
    }
    /* The names, keys and values belong to f: no freeing, valid until fs_close. */
    for (const char *const *key = fs_metadata_key_list(f); *key; key++)
        printf("metadata %s = %s\n", *key, fs_get_metadata(f, *key));
    fs_close(f);
    return 0;
}

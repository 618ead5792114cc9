/* Who holds a file: a real scan of /proc/<pid>/fd, like the vendor driver's busy check.
 * A match is either the readlink text (host view) or the same inode (a process in another
 * mount namespace that got the file through a bind mount shows a different path). */
#define _GNU_SOURCE
#include "sim.h"

#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int sim_path_held(const char *path)
{
    struct stat target;
    int have_target = stat(path, &target) == 0;
    DIR *proc = opendir("/proc");
    if (!proc)
        return 0;
    int held = 0;
    struct dirent *pe;
    while (!held && (pe = readdir(proc)) != NULL) {
        if (!isdigit((unsigned char)pe->d_name[0]))
            continue;
        char fddir[64];
        snprintf(fddir, sizeof(fddir), "/proc/%s/fd", pe->d_name);
        DIR *fds = opendir(fddir);
        if (!fds)
            continue;
        struct dirent *fe;
        while ((fe = readdir(fds)) != NULL) {
            if (fe->d_name[0] == '.')
                continue;
            char link[128], dest[PATH_MAX];
            snprintf(link, sizeof(link), "%s/%s", fddir, fe->d_name);
            ssize_t n = readlink(link, dest, sizeof(dest) - 1);
            if (n <= 0)
                continue;
            dest[n] = '\0';
            if (!strcmp(dest, path)) {
                held = 1;
                break;
            }
            if (have_target && dest[0] == '/') {
                struct stat st;
                if (stat(link, &st) == 0 && st.st_dev == target.st_dev &&
                    st.st_ino == target.st_ino) {
                    held = 1;
                    break;
                }
            }
        }
        closedir(fds);
    }
    closedir(proc);
    return held;
}

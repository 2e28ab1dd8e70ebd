set -e
cd /work/main/tests/softroce/.scratch
rm -rf b; mkdir b; cd b
cat > lib.c <<'E'
int add(int a,int b){return a+b;}
E
cat > main.c <<'E'
#include <stdio.h>
#include <sys/mman.h>
#include <fcntl.h>
#include <unistd.h>
#include <string.h>
int add(int,int);
int main(){ int fd=open("shm.dat",O_RDWR|O_CREAT,0644); ftruncate(fd,4096);
 char*p=mmap(0,4096,PROT_READ|PROT_WRITE,MAP_SHARED,fd,0);
 if(p==MAP_FAILED){perror("mmap shared");return 2;}
 strcpy(p,"mapped-write-ok"); msync(p,4096,MS_SYNC); munmap(p,4096); close(fd);
 printf("add=%d\n",add(2,3)); return 0;}
E
t0=$(date +%s.%N)
gcc -O2 -fPIC -shared -o libadd.so lib.c
gcc -O2 -o main main.c -L. -ladd -Wl,-rpath,'$ORIGIN'
./main
cat shm.dat | tr -d '\0'; echo
t1=$(date +%s.%N)
for i in $(seq 1 30); do printf 'int f%d(void){return %d;}\n' $i $i > f$i.c; done
printf 'all: $(patsubst %%.c,%%.o,$(wildcard f*.c))\n' > Makefile
make -s -j2
t2=$(date +%s.%N)
echo "first-build $(echo "$t1 - $t0" | bc) s, 30 objects $(echo "$t2 - $t1" | bc) s"

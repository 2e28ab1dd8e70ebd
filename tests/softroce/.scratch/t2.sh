cd /work/main/tests/softroce/.scratch/b
sed -i 's/^ strcpy.*//; s/^ char\*p=.*//; s/ if(p==MAP_FAILED).*//' main.c
gcc -O2 -o main2 main.c -L. -ladd -Wl,-rpath,'$ORIGIN' && ./main2 && echo exec+so-ok
mkdir -p many; for i in $(seq 1 300); do echo "line $i" > many/$i.txt; done
t0=$(date +%s.%N); for r in 1 2 3 4 5; do cat many/*.txt > /dev/null; done; t1=$(date +%s.%N)
echo "read 1500 files: $(echo "$t1 - $t0" | bc) s"
t0=$(date +%s.%N); for r in $(seq 1 20); do stat -c %s main2 >/dev/null; ls -l many > /dev/null; done; t1=$(date +%s.%N)
echo "20x ls 300: $(echo "$t1 - $t0" | bc) s"
dd if=/dev/zero of=big bs=1M count=50 2>&1 | tail -1
dd if=big of=/dev/null bs=1M 2>&1 | tail -1
rm -f big

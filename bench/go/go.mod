module axbench

go 1.19

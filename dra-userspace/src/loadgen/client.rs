pub async fn _x(){}
